"""Compile every Triton kernel of ``kernels/`` for a CUDA target, without a GPU.

The interpreter accepts code the compiler rejects (non-constexpr globals, type changes of loop
variables, ...). Triton's front end, its MLIR passes and the bundled ``ptxas`` run on any
machine, so this check proves on CPU that the kernels the interpreter tests also compile::

    TRITON_INTERPRET=0 python -m kernels.compile_check [ARCH ...]   # default: 90 (H100)

It must run in a process where ``TRITON_INTERPRET=0`` was set before Triton was imported
(``tests/kernels/test_compile_cuda.py`` starts one). Exit status 1 lists the failures.
"""

from __future__ import annotations

import os
import sys
from typing import Any

F32, F16, U8, I8 = "*fp32", "*fp16", "*u8", "*i8"

# Pointer and float arguments by name; every other non-constexpr argument is an i32 scalar.
_DECOUPLED = {
    "qs_ptr": F32, "qg_ptr": F32, "ksn_ptr": F32, "kgn_ptr": F32, "vn_ptr": F32,
    "ks_codes": U8, "ks_scales": F16, "kg_codes": I8, "kg_scales": F16,
    "v_codes": U8, "v_scales": F16, "m_ptr": F32, "d_ptr": F32, "o_ptr": F32,
    "mp_ptr": F32, "dp_ptr": F32, "op_ptr": F32, "ks_tail": F16, "kg_tail": F16,
    "v_tail": F16, "out_ptr": F32, "sem_scale": "fp32", "geo_scale": "fp32",
}  # fmt: skip
_GQA = {
    "q_ptr": F32, "k_ptr": F16, "v_ptr": F16, "mask_ptr": F32, "out_ptr": F32,
    "mp_ptr": F32, "lp_ptr": F32, "ap_ptr": F32, "scale": "fp32",
}  # fmt: skip
_QUANT = {
    "x_ptr": F32, "codes_ptr": U8, "scales_ptr": F16, "mid_ptr": F32, "lv_ptr": F32,
    "out_ptr": F32, "data_ptr": U8, "qmax": "fp32",
}  # fmt: skip


def _cases() -> list[tuple[Any, dict[str, str], dict[str, Any]]]:
    from kernels import decoupled_triton as D
    from kernels import gqa_triton as G
    from kernels import quant_triton as Q

    heads = {"H": 32, "DS": 32, "DG": 64, "DV": 128}
    cases: list[tuple[Any, dict[str, str], dict[str, Any]]] = []
    for has_null in (False, True):
        cases.append(
            (
                D.update_kernel,
                _DECOUPLED,
                {**heads, "QBLOCK": 32, "BLOCK_N": 32, "HAS_NULL": has_null},
            )
        )
        cases.append((D.reduce_kernel, _DECOUPLED, {**heads, "HAS_NULL": has_null}))
    cases.append((D.partition_kernel, _DECOUPLED, {**heads, "QBLOCK": 32, "BLOCK_N": 32}))
    cases.append((D.finalize_kernel, _DECOUPLED, {**heads, "BLOCK_N": 32}))
    gqa = {
        "D": 128,
        "DV": 128,
        "GROUP": 4,
        "GROUP_P2": 4,
        "BLOCK_D": 128,
        "BLOCK_DV": 128,
        "BLOCK_N": 32,
    }
    odd = {
        "D": 40,
        "DV": 40,
        "GROUP": 3,
        "GROUP_P2": 4,
        "BLOCK_D": 64,
        "BLOCK_DV": 64,
        "BLOCK_N": 32,
    }
    cases.append((G.one_pass_kernel, _GQA, gqa))
    cases.append((G.partition_kernel, _GQA, odd))
    cases.append((G.reduce_kernel, _GQA, {"N_HEAD": 32, "DV": 40, "BLOCK_DV": 64}))
    for kind in (0, 1, 2):
        types = {**_QUANT, "codes_ptr": I8 if kind == 0 else U8}
        cases.append((Q.quantize_kernel, types, {"KIND": kind, "QB": 32, "NB": 4}))
        cases.append((Q.dequantize_kernel, types, {"KIND": kind, "QB": 32, "NB": 4}))
    for is_q8 in (True, False):
        cases.append((Q.ggml_quantize_kernel, {**_QUANT, "out_ptr": U8}, {"NB": 4, "IS_Q8": is_q8}))
        cases.append((Q.ggml_dequantize_kernel, _QUANT, {"NB": 4, "IS_Q8": is_q8}))
    return cases


def compile_all(archs: list[int]) -> list[str]:
    """Compile every case for every arch; returns the failures (empty when all compile)."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    failures = []
    for arch in archs:
        target = GPUTarget("cuda", arch, 32)
        for fn, types, constexprs in _cases():
            names = fn.arg_names
            signature = {n: "constexpr" if n in constexprs else types.get(n, "i32") for n in names}
            consts = {(names.index(k),): v for k, v in constexprs.items()}
            src = ASTSource(fn=fn, signature=signature, constexprs=consts)
            try:
                triton.compile(src, target=target)
            except Exception as exc:  # report every failing kernel, not just the first
                failures.append(
                    f"sm_{arch} {fn.__name__} {constexprs}: {type(exc).__name__}: {exc}"
                )
    return failures


def main(argv: list[str]) -> int:
    if os.environ.get("TRITON_INTERPRET", "") not in ("0", "false", "False"):
        print("set TRITON_INTERPRET=0 before running the compile check", file=sys.stderr)
        return 2
    archs = [int(a) for a in argv] or [90]
    failures = compile_all(archs)
    for line in failures:
        print(line, file=sys.stderr)
    n = len(_cases()) * len(archs)
    print(
        f"compiled {n - len(failures)}/{n} kernel variants for sm_{', sm_'.join(map(str, archs))}"
    )
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
