#!/usr/bin/env python3
"""Baseline (c) of issue 4: PyTorch symmetric-memory async-TP on the shapes of `kosmos bench tp`.

Launch with torchrun, one process per GPU (run from the repository root on the GPU machine):

  NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 \\
    torchrun --standalone --nproc-per-node 8 bench/torch_async_tp.py \\
      --models llama3-70b,gpt3-175b --ops ag_gemm,gemm_rs --json out.json

For every (model, op), world W (= WORLD_SIZE), rank r, bf16:
  ag_gemm   X_r [M/W, K], W_r [K, N/W]:  Y_r = AllGather(X) @ W_r           [M, N/W]
            async-TP:   torch.ops.symm_mem.fused_all_gather_matmul(X_r, [W_r], 0, group)
                        (return_A=True where the op takes it: kosmos also returns the gathered X,
                        and return_A=False would let torch pick its NVLink-multicast path)
  gemm_rs   X_r [M, K/W], W_r [K/W, N]:  Y_r = rows r of sum_s X_s @ W_s     [M/W, N]
            async-TP:   torch.ops.symm_mem.fused_matmul_reduce_scatter(X_r, W_r, "sum", 0, group)
and, for reference on the same tensors, the sequential composition in torch
(all_gather_into_tensor then mm; mm then reduce_scatter_tensor). gemm_ar and the backward ops have
no symm_mem op: they are skipped with a note (kosmos's (a)/(b) cover them).

Verification: every rank checks the async-TP output against the sequential torch composition
(relative L2 error < 2e-2); any failing rank fails the run.
Timing: per repetition a barrier (all_reduce of one int) then CUDA events around the op on the
current stream; --warmup warm-ups, median of --reps per rank, reported as the max over ranks.
NVLink multicast stays off: NCCL_NVLS_ENABLE=0 and TORCH_SYMM_MEM_DISABLE_MULTICAST=1 are set here
before torch.distributed starts (a different value in the environment is an error).
Rank 0 prints a table and writes --json (one record per case, with GPU, torch, NCCL, commit).
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

MODELS = {  # same as cli/cmd_bench_tp.cu: (N, K); M = --tokens (small-m: 2048)
    "llama3-70b": (28672, 8192),
    "gpt3-175b": (49152, 12288),
    "llama3-405b": (53248, 16384),
    "llama3-8b": (14336, 4096),
    "small-m": (3584, 8192),
}
OPS = ("ag_gemm", "gemm_rs", "gemm_ar")


def die(msg, code=2):
    print(f"torch_async_tp: error: {msg}", file=sys.stderr)
    sys.exit(code)


def force_env(name, value):
    cur = os.environ.get(name)
    if cur is not None and cur != value:
        die(f"{name}={cur} in the environment: this benchmark keeps NVLink multicast off ({name}={value})")
    os.environ[name] = value


def git_commit():
    if os.environ.get("KOSMOS_COMMIT"):
        return os.environ["KOSMOS_COMMIT"]
    try:
        return subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], capture_output=True, text=True,
                              timeout=10).stdout.strip() or "unknown"
    except Exception:  # noqa: BLE001 - no git on the GPU machine is normal
        return "unknown"


def parse_args():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--models", default="llama3-70b", help="comma-separated: " + ",".join(MODELS))
    p.add_argument("--ops", default="ag_gemm,gemm_rs", help="comma-separated: ag_gemm,gemm_rs (gemm_ar: skipped, no symm_mem op)")
    p.add_argument("--tokens", type=int, default=8192, help="M (tokens per step); small-m always uses 2048")
    p.add_argument("--reps", type=int, default=20)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--json", default="", help="rank 0 writes the results here")
    a = p.parse_args()
    a.models = [m for m in a.models.split(",") if m]
    a.ops = [o for o in a.ops.split(",") if o]
    for m in a.models:
        if m not in MODELS:
            die(f"unknown model '{m}' (known: {', '.join(MODELS)})")
    for o in a.ops:
        if o not in OPS:
            die(f"unknown op '{o}' (known: {', '.join(OPS)})")
    if a.reps < 3 or a.warmup < 1:
        die("--reps must be >= 3 and --warmup >= 1")
    return a


def main():
    args = parse_args()
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK"):
        if name not in os.environ:
            die(f"{name} is not set: launch with torchrun --nproc-per-node W {sys.argv[0]} ...")
    force_env("NCCL_NVLS_ENABLE", "0")
    force_env("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1")

    try:
        import torch
        import torch.distributed as dist
    except ImportError as e:
        die(f"cannot import torch ({e}); run this with the GPU machine's Python (torch with CUDA)")
    if not torch.cuda.is_available():
        die(f"torch.cuda.is_available() is False (torch {torch.__version__})")
    try:
        import torch.distributed._symmetric_memory as symm_mem
    except ImportError as e:
        die(f"torch {torch.__version__} has no torch.distributed._symmetric_memory ({e}); async-TP needs torch >= 2.5")
    if not hasattr(torch.ops, "symm_mem") or not hasattr(torch.ops.symm_mem, "fused_all_gather_matmul"):
        die(f"torch {torch.__version__}: torch.ops.symm_mem.fused_all_gather_matmul is missing")

    rank, world, local = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), int(os.environ["LOCAL_RANK"])
    if local >= torch.cuda.device_count():
        die(f"LOCAL_RANK={local} but only {torch.cuda.device_count()} GPU(s) are visible")
    torch.cuda.set_device(local)
    dev = torch.device("cuda", local)
    dist.init_process_group("nccl", device_id=dev)
    group = dist.group.WORLD
    group_name = group.group_name
    enable = getattr(symm_mem, "enable_symm_mem_for_group", None)
    if enable is not None:  # deprecated (a no-op need) in newer torch, required in older
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            enable(group_name)
    lead = rank == 0
    one = torch.ones(1, dtype=torch.int32, device=dev)

    def barrier():
        dist.all_reduce(one)

    def max_over_ranks(values):
        t = torch.tensor(values, dtype=torch.float64, device=dev)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        return t.tolist()

    def time_ms(fn):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        for _ in range(args.warmup):
            barrier()
            fn()
        torch.cuda.synchronize()
        v = []
        for _ in range(args.reps):
            barrier()
            a.record()
            fn()
            b.record()
            b.synchronize()
            v.append(a.elapsed_time(b))
        return statistics.median(v)

    def rel_err(x, ref):
        x, ref = x.double(), ref.double()
        if not torch.isfinite(x).all():
            return float("inf")
        return ((x - ref).norm() / ref.norm().clamp_min(1e-30)).item()

    ag_takes_return_a = True  # decided on first use

    def fused_ag(x, w):
        nonlocal ag_takes_return_a
        if ag_takes_return_a:
            try:
                return torch.ops.symm_mem.fused_all_gather_matmul(x, [w], 0, group_name, return_A=True)
            except (TypeError, RuntimeError) as e:
                if "return_A" not in str(e):
                    raise
                ag_takes_return_a = False
        return torch.ops.symm_mem.fused_all_gather_matmul(x, [w], 0, group_name)

    results = []
    for model in args.models:
        n_full, k_full = MODELS[model]
        m_full = 2048 if model == "small-m" else args.tokens
        for op in args.ops:
            rec = {"model": model, "op": op, "world": world, "m": m_full, "n": n_full, "k": k_full}
            if op == "gemm_ar":
                rec["skipped"] = "no torch.ops.symm_mem op for GEMM+AllReduce"
                results.append(rec)
                continue
            if m_full % world or (op == "ag_gemm" and n_full % world) or (op == "gemm_rs" and k_full % world):
                rec["skipped"] = f"shape not divisible by world {world}"
                results.append(rec)
                continue
            gen = torch.Generator(device=dev)
            gen.manual_seed(1000 + rank)
            R = m_full // world
            if op == "ag_gemm":
                x = torch.empty(R, k_full, dtype=torch.bfloat16, device=dev).uniform_(-1, 1, generator=gen)
                w = torch.empty(k_full, n_full // world, dtype=torch.bfloat16, device=dev).uniform_(-0.05, 0.05, generator=gen)
                gathered = torch.empty(m_full, k_full, dtype=torch.bfloat16, device=dev)

                def seq():
                    dist.all_gather_into_tensor(gathered, x)
                    return torch.mm(gathered, w)

                def fused():
                    return fused_ag(x, w)[1][0]
            else:
                x = torch.empty(m_full, k_full // world, dtype=torch.bfloat16, device=dev).uniform_(-1, 1, generator=gen)
                w = torch.empty(k_full // world, n_full, dtype=torch.bfloat16, device=dev).uniform_(-0.05, 0.05, generator=gen)
                out = torch.empty(R, n_full, dtype=torch.bfloat16, device=dev)

                def seq():
                    dist.reduce_scatter_tensor(out, torch.mm(x, w))
                    return out

                def fused():
                    return torch.ops.symm_mem.fused_matmul_reduce_scatter(x, w, "sum", 0, group_name)

            try:
                ref = seq().clone()
                got = fused()
                err = rel_err(got, ref) if tuple(got.shape) == tuple(ref.shape) else float("inf")
                failed = 0.0
            except Exception as e:  # noqa: BLE001 - reported, and every rank must reach the reduction below
                print(f"torch_async_tp: rank {rank}: {model} {op}: {type(e).__name__}: {e}", file=sys.stderr)
                err, failed = float("inf"), 1.0
            err, failed = max_over_ranks([err if err != float("inf") else 1e300, failed])
            if failed or not err < 2e-2:
                if lead:
                    print(f"torch_async_tp: {model} {op}: verification failed (rel err {err:.3e}, "
                          f"{'an exception on some rank' if failed else 'mismatch'})", file=sys.stderr)
                rec["error"] = "verification failed" if not failed else "exception on some rank (see stderr)"
                rec["rel_err_vs_sequential"] = err
                results.append(rec)
                continue
            t_async = time_ms(fused)
            t_seq = time_ms(seq)
            t_async, t_seq = max_over_ranks([t_async, t_seq])
            flops = 2.0 * m_full * n_full * k_full
            rec.update({
                "torch_async_tp_ms": t_async,
                "torch_async_tp_tflops": flops / (t_async * 1e-3) / 1e12,
                "torch_sequential_ms": t_seq,
                "rel_err_vs_sequential": err,
                "async_tp_op": ("torch.ops.symm_mem.fused_all_gather_matmul" + (" (return_A=True)" if ag_takes_return_a else "")
                                if op == "ag_gemm" else "torch.ops.symm_mem.fused_matmul_reduce_scatter"),
            })
            results.append(rec)
            if lead:
                print(f"{model:12s} {op:8s} W={world} M={m_full} N={n_full} K={k_full}: async-TP {t_async:8.3f} ms "
                      f"({rec['torch_async_tp_tflops']:7.1f} TFLOP/s), torch sequential {t_seq:8.3f} ms, rel.err {err:.2e}",
                      flush=True)
            del x, w
            torch.cuda.empty_cache()

    if lead and args.json:
        try:
            nccl = ".".join(str(v) for v in torch.cuda.nccl.version())
        except Exception:  # noqa: BLE001
            nccl = "unknown"
        meta = {
            "bench": "tp_torch_async_tp",
            "command": " ".join(sys.argv),
            "commit": git_commit(),
            "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "gpu": torch.cuda.get_device_name(dev),
            "torch": torch.__version__,
            "cuda": torch.version.cuda,
            "nccl": nccl,
            "world": world,
            "reps": args.reps,
            "warmup": args.warmup,
            "timing": "per rank: all_reduce barrier, CUDA events around the op; median of reps; max over ranks",
            "env": {k: os.environ.get(k) for k in ("NCCL_NVLS_ENABLE", "TORCH_SYMM_MEM_DISABLE_MULTICAST")},
            "results": results,
        }
        with open(args.json, "w") as f:
            json.dump(meta, f, indent=2)
            f.write("\n")
    dist.barrier()
    dist.destroy_process_group()
    if any("error" in r for r in results):
        sys.exit(1)


if __name__ == "__main__":
    main()
