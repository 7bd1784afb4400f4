"""Triton fused decode kernels over quantized KV caches (and their torch references).

* :mod:`kernels.quant` / :mod:`kernels.quant_triton`: q8_0, q4_0, nf4 per-token blocks and
  GGML Q8_0 / Q4_0 blocks; :mod:`kernels.policy`: the KV cache policy string;
* :mod:`kernels.decode_attention`: ``gqa_decode`` over the reference decoder's KV cache;
* :mod:`kernels.decoupled`: ``decoupled_decode`` over a :class:`~kernels.decoupled_cache.
  DecoupledKVCache` with an optional null token;
* :mod:`kernels.dispatch`: path choice, eligibility and the :class:`DispatchRecord` trace.

Import :mod:`kernels._triton` (directly or through these modules) before anything else imports
Triton kernels: it decides between the interpreter and compiled kernels. See docs/kernels.md.
"""
