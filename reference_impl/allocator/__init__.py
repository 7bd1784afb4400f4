"""Buffer and graph allocation with ggml-alloc parity (spec/allocator.md).

* :mod:`.graph` — the graph description (tensors, ggml's node/leaf order);
* :mod:`.linear` — the linear allocator (``tallocr``), alignment and overflow rules;
* :mod:`.chunks` — the chunk allocator (``dyn_tallocr``): free lists over up to 16 chunks;
* :mod:`.planner` — the graph planner (``gallocr``): reserve, in-place reuse, alloc_graph;
* :mod:`.context` — ``alloc_ctx_tensors``.
"""
