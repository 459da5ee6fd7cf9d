#!/usr/bin/env python3
"""PyTorch baselines for issues 3 and 5, on the same shapes (and routing) as the kosmos benchmarks.

Subcommands (run from the repository root on the GPU machine; needs torch with CUDA):

  moe --routing PATH --json OUT
      The unfused eager MoE forward of issue 5 on the exact routing that `kosmos bench moe
      --dump-routing PATH` wrote (same T, H, I, E, k and the same expert ids, hence the same work):
      permute (stable argsort by expert), torch._grouped_mm for gate+up with group offsets,
      SwiGLU, torch._grouped_mm for down, router-weight scale, un-permute by index_copy (unique
      indices: deterministic) and the sum over the k slots (one fixed-order reduction).
      x and the expert weights are random bf16 (their values need not match kosmos's).
      W = 1 only (all experts on this GPU).
      --backward also times the autograd backward of that pipeline (dx, d_weights and the expert
      weights' gradients, from a random dy; torch keeps the forward's activations, while kosmos's
      backward recomputes H1) and the forward + backward step, after checking dx of a few tokens
      against an fp32 autograd reference.

  grouped-gemm (--sizes PATH | --deepseek) --json OUT
      torch._grouped_mm on issue 3's grouped case (32 local experts of the DeepSeek-V3 proxy:
      K = 7168, N = 4096 for gate+up; K = 2048, N = 7168 for down) and one dense torch.mm of the
      same total M, TFLOP/s for each. --sizes reads the per-expert M that
      `gemm_engine_bench --dump-groups PATH` writes (the SAME group sizes as that benchmark);
      --deepseek makes sizes with the same recipe but Python's shuffle (NOT the same sizes).
      --data uniform fills A and B like gemm_engine_bench (uniform in [-1, 1), rounded to bf16)
      instead of torch.randn (the default): the card's power draw, and so its clocks under a
      sustained GEMM, depend on the operand values.

Timing: CUDA events around each repetition, warm-up, median of --reps.
"""

import argparse
import json
import math
import os
import platform
import random
import shlex
import statistics
import subprocess
import sys
import time


def die(msg):
    print(f"torch_baselines: error: {msg}", file=sys.stderr)
    sys.exit(2)


def need_torch():
    try:
        import torch  # noqa: F401
    except ImportError as e:  # pragma: no cover - depends on the machine
        die(f"cannot import torch ({e}); run this on the GPU machine's Python (torch with CUDA)")
    import torch

    if not torch.cuda.is_available():
        die("torch.cuda.is_available() is False: no CUDA device visible to torch "
            f"(torch {torch.__version__}, built for CUDA {torch.version.cuda})")
    if not hasattr(torch, "_grouped_mm"):
        die(f"torch {torch.__version__} has no torch._grouped_mm (needs torch >= 2.8)")
    cap = torch.cuda.get_device_capability()
    if cap < (9, 0):
        print(f"torch_baselines: warning: compute capability {cap}: torch._grouped_mm may use a slow fallback",
              file=sys.stderr)
    return torch


def git_commit():
    try:
        return subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10,
                              check=False).stdout.strip() or "unknown"
    except Exception:  # noqa: BLE001 - metadata only
        return "unknown"


def metadata(torch):
    p = torch.cuda.get_device_properties(torch.cuda.current_device())
    return {
        "gpu": p.name,
        "sms": p.multi_processor_count,
        "torch": torch.__version__,
        "torch_cuda": torch.version.cuda,
        "python": platform.python_version(),
        "commit": git_commit(),
        "command": "python3 " + " ".join(shlex.quote(a) for a in sys.argv),
        "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }


def time_ms(torch, fn, warmup, reps):
    """Median over reps of CUDA-event time around one call of fn, after warmup calls."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    for i in range(reps):
        starts[i].record()
        fn()
        ends[i].record()
    torch.cuda.synchronize()
    return statistics.median(s.elapsed_time(e) for s, e in zip(starts, ends))


def grouped_b(torch, a, b, offs):
    """Return b in a layout torch._grouped_mm accepts for a [M, K] x b [G, K, N] with offsets.

    A plain contiguous b (row-major [K, N] per group) is tried first. Some torch builds want the 3d
    operand column-major in its last two dims (strides (K*N, 1, K)); if the plain call raises, we
    pass the same values with those strides: b.transpose(-2, -1).contiguous().transpose(-2, -1).
    Decided once here, outside the timed loop.
    """
    try:
        torch._grouped_mm(a, b, offs=offs, out_dtype=torch.bfloat16)
        torch.cuda.synchronize()
        return b, "row-major [G, K, N]"
    except RuntimeError as e:
        print(f"torch_baselines: note: torch._grouped_mm refused a contiguous b ({str(e).splitlines()[0]}); "
              "using a column-major b", file=sys.stderr)
    bc = b.transpose(-2, -1).contiguous().transpose(-2, -1)
    del b
    torch._grouped_mm(a, bc, offs=offs, out_dtype=torch.bfloat16)
    torch.cuda.synchronize()
    return bc, "column-major [G, K, N] (strides K*N, 1, K)"


def check_grouped(torch, a, b, offs, out, groups, what):
    """Compare the rows of a few non-empty groups of a grouped result against torch.mm (fp32)."""
    ends = offs.tolist()
    starts = [0] + ends[:-1]
    live = [g for g in range(len(ends)) if ends[g] > starts[g]]
    num = den = 0.0
    for g in (live[:1] + live[-1:]) if live else []:
        r0, r1 = starts[g], min(ends[g], starts[g] + 64)
        ref = a[r0:r1].float() @ b[g].float()
        num += (out[r0:r1].float() - ref).pow(2).sum().item()
        den += ref.pow(2).sum().item()
    rel = math.sqrt(num / max(den, 1e-30))
    if not rel < 2e-2:
        die(f"{what}: torch._grouped_mm disagrees with torch.mm on groups {groups}: relative error {rel:.3e}")
    return rel


# ---------------------------------------------------------------------------------------------
# moe


def cmd_moe(args):
    with open(args.routing) as f:
        r = json.load(f)
    if r.get("format") != "kosmos-moe-routing-v1":
        die(f"{args.routing}: not a routing file of `kosmos bench moe --dump-routing` (format {r.get('format')!r})")
    W, T, H, I, E, k = (int(r[key]) for key in ("world", "tokens", "hidden", "intermediate", "experts", "top_k"))
    if W != 1:
        die(f"{args.routing}: world = {W}; this baseline runs W = 1 only (all E experts on one GPU). "
            "Dump the routing with --world 1.")
    ids_l, w_l = r["ranks"][0]["ids"], r["ranks"][0]["weights"]
    if len(ids_l) != T * k or len(w_l) != T * k:
        die(f"{args.routing}: rank 0 has {len(ids_l)} ids / {len(w_l)} weights, expected T*k = {T * k}")
    if any(not 0 <= e < E for e in ids_l):
        die("the routing drops slots (ids outside [0, E)); this baseline does not handle dropped slots")
    torch = need_torch()
    dev = torch.device("cuda")
    g = torch.Generator(device=dev)
    g.manual_seed(args.seed)
    bf = torch.bfloat16

    ids = torch.tensor(ids_l, dtype=torch.int64, device=dev).view(T, k)
    wts = torch.tensor(w_l, dtype=torch.float32, device=dev).view(T, k)
    x = torch.randn(T, H, device=dev, dtype=bf, generator=g)
    # gate_up [E, H, 2I]: plain [gate | up] columns (the kosmos interleave does not change the work)
    gu = (torch.randn(E, H, 2 * I, device=dev, dtype=bf, generator=g) * (1.0 / math.sqrt(H))).to(bf)
    dn = (torch.randn(E, I, H, device=dev, dtype=bf, generator=g) * (1.0 / math.sqrt(I))).to(bf)

    counts0 = torch.bincount(ids.view(-1), minlength=E)
    offs0 = torch.cumsum(counts0, 0, dtype=torch.int32)
    rows = T * k
    # choose the accepted layout of the 3d operands once (outside the timed loop)
    probe1 = torch.zeros(rows, H, device=dev, dtype=bf)
    gu, gu_layout = grouped_b(torch, probe1, gu, offs0)
    probe2 = torch.zeros(rows, I, device=dev, dtype=bf)
    dn, dn_layout = grouped_b(torch, probe2, dn, offs0)
    del probe1, probe2

    def forward(x=x, gu=gu, dn=dn, wts=wts):
        flat = ids.view(-1)
        order = torch.argsort(flat, stable=True)                    # permute: slots grouped by expert
        counts = torch.bincount(flat, minlength=E)
        offs = torch.cumsum(counts, 0, dtype=torch.int32)           # group ends
        xs = x.index_select(0, order // k)
        h = torch._grouped_mm(xs, gu, offs=offs, out_dtype=bf)      # [rows, 2I]
        gate, up = h.split(I, dim=-1)
        a = torch.nn.functional.silu(gate) * up                     # SwiGLU
        o = torch._grouped_mm(a, dn, offs=offs, out_dtype=bf)       # [rows, H]
        o = o * wts.view(-1).index_select(0, order).to(bf).unsqueeze(1)  # router-weight scale
        slots = torch.zeros_like(o).index_copy(0, order, o)         # un-permute (unique indices)
        return slots.view(T, k, H).sum(dim=1, dtype=torch.float32).to(bf)  # k slots, fixed order

    y = forward()
    torch.cuda.synchronize()
    # self-check: a few tokens against a per-slot fp32 reference from the same bf16 tensors
    num = den = 0.0
    for t in sorted({0, T // 2, T - 1}):
        ref = torch.zeros(H, device=dev, dtype=torch.float32)
        for j in range(k):
            e = int(ids[t, j])
            h = x[t].float() @ gu[e].float()
            a = torch.nn.functional.silu(h[:I]) * h[I:]
            ref += float(wts[t, j]) * (a @ dn[e].float())
        num += (y[t].float() - ref).pow(2).sum().item()
        den += ref.pow(2).sum().item()
    rel = math.sqrt(num / max(den, 1e-30))
    if not rel < 3e-2:
        die(f"moe pipeline vs fp32 reference: relative error {rel:.3e} (layout problem?)")

    ms = time_ms(torch, forward, args.warmup, args.reps)
    flops = 2.0 * rows * (H * 2 * I + I * H)
    weight_bytes = (gu.numel() + dn.numel()) * 2
    res = metadata(torch)
    res.update({
        "bench": "torch_moe_unfused",
        "routing_file": args.routing,
        "routing_command": r.get("command"),
        "model": r.get("model"), "routing": r.get("routing"),
        "world": W, "tokens": T, "hidden": H, "intermediate": I, "experts": E, "top_k": k,
        "rows": rows,
        "empty_experts": int((counts0 == 0).sum().item()),
        "max_rows_per_expert": int(counts0.max().item()),
        "pipeline": "argsort(stable) permute, torch._grouped_mm gate+up, SwiGLU, torch._grouped_mm down, "
                    "weight scale, index_copy un-permute, fp32 sum over k; eager",
        "gate_up_layout": gu_layout, "down_layout": dn_layout,
        "warmup": args.warmup, "reps": args.reps,
        "ms": ms,
        "flops": flops,
        "tflops": flops / (ms * 1e-3) / 1e12,
        "weight_bytes": weight_bytes,
        "rel_err_vs_fp32_reference": rel,
    })
    print(f"torch MoE forward (unfused, eager) {r.get('model')} W={W} T={T} H={H} I={I} E={E} k={k} "
          f"routing={r.get('routing')} on {res['gpu']}, torch {res['torch']}")
    print(f"  {ms:.3f} ms  {res['tflops']:.1f} TFLOP/s  ({rows} routed rows, {res['empty_experts']} empty experts; "
          f"rel.err vs fp32 reference {rel:.2e})")
    if args.backward:
        res.update(moe_backward(torch, args, forward, x, gu, dn, wts, ids, T, H, I, k))
        print(f"  backward (autograd, eager) {res['backward_ms']:.3f} ms; forward + backward {res['fwd_bwd_ms']:.3f} ms "
              f"(dx rel.err vs fp32 autograd reference {res['backward_rel_err_dx']:.2e})")
    write_json(args.json, res)


def moe_backward(torch, args, forward, x, gu, dn, wts, ids, T, H, I, k):
    """Autograd backward of the unfused pipeline: dx, d_weights, d_gate_up, d_down from dy."""
    dev = x.device
    g = torch.Generator(device=dev)
    g.manual_seed(args.seed + 1)
    dy = torch.randn(T, H, device=dev, dtype=torch.bfloat16, generator=g)

    def leaves():
        return [t.detach().requires_grad_(True) for t in (x, gu, dn, wts)]

    lv = leaves()
    forward(*lv).backward(dy)
    torch.cuda.synchronize()
    if any(t.grad is None or not bool(torch.isfinite(t.grad.float()).all()) for t in lv):
        die("moe backward: a gradient is missing or not finite")
    # dx of a few tokens against fp32 autograd through the same bf16 values
    num = den = 0.0
    for t in sorted({0, T // 2, T - 1}):
        xt = x[t].float().clone().requires_grad_(True)
        out = torch.zeros(H, device=dev, dtype=torch.float32)
        for j in range(k):
            e = int(ids[t, j])
            h = xt @ gu[e].float()
            out = out + float(wts[t, j]) * ((torch.nn.functional.silu(h[:I]) * h[I:]) @ dn[e].float())
        out.backward(dy[t].float())
        num += (lv[0].grad[t].float() - xt.grad).pow(2).sum().item()
        den += xt.grad.pow(2).sum().item()
    rel = math.sqrt(num / max(den, 1e-30))
    if not rel < 3e-2:
        die(f"moe backward dx vs fp32 autograd reference: relative error {rel:.3e}")
    times = []
    for i in range(args.warmup + args.reps):  # the forward runs outside the timed span
        lv = leaves()
        y = forward(*lv)
        torch.cuda.synchronize()
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        y.backward(dy)
        e.record()
        torch.cuda.synchronize()
        if i >= args.warmup:
            times.append(s.elapsed_time(e))
    bwd_ms = statistics.median(times)
    lv = leaves()
    step_ms = time_ms(torch, lambda: forward(*lv).backward(dy), args.warmup, args.reps)
    return {
        "backward_ms": bwd_ms,
        "fwd_bwd_ms": step_ms,
        "backward_rel_err_dx": rel,
        "backward_pipeline": "torch autograd through the forward above (activations saved, no recompute); "
                             "dx, d_weights, d_gate_up, d_down",
    }


# ---------------------------------------------------------------------------------------------
# grouped-gemm


def deepseek_sizes():
    """Same recipe as gemm_engine_bench's expert_rows() (Zipf-like 1/(g+1)^0.7, shuffled, experts
    3, 17, 29 empty, 24,588 rows) but Python's shuffle: NOT the same sizes as that benchmark."""
    G, total = 32, 24588
    w = [1.0 / math.pow(g + 1.0, 0.7) for g in range(G)]
    random.Random(1234).shuffle(w)
    w[3] = w[17] = w[29] = 0.0
    s = sum(w)
    m = [int(math.floor(x / s * total)) for x in w]
    acc, g = sum(m), 0
    while acc < total:
        if m[g] > 0:
            m[g] += 1
            acc += 1
        g = (g + 1) % G
    return m


def cmd_grouped(args):
    if args.sizes:
        with open(args.sizes) as f:
            s = json.load(f)
        gm = [int(v) for v in s["group_m"]]
        cases = [(c["name"], int(c["n"]), int(c["k"])) for c in s["cases"]]
        source = f"{args.sizes} ({s.get('source', '?')})"
    else:
        gm = deepseek_sizes()
        cases = [("moe gate+up", 4096, 7168), ("moe down", 7168, 2048)]
        source = "--deepseek: synthetic, same recipe as gemm_engine_bench expert_rows(), different shuffle"
        print("torch_baselines: warning: --deepseek sizes are NOT gemm_engine_bench's; use --sizes for a "
              "like-for-like comparison", file=sys.stderr)
    if not gm or any(v < 0 for v in gm):
        die("group sizes must be a non-empty list of non-negative integers")
    torch = need_torch()
    dev = torch.device("cuda")
    gen = torch.Generator(device=dev)
    gen.manual_seed(args.seed)
    bf = torch.bfloat16
    G, total = len(gm), sum(gm)

    def fill(*shape):
        if args.data == "uniform":
            return (torch.rand(*shape, device=dev, dtype=torch.float32, generator=gen) * 2 - 1).to(bf)
        return torch.randn(*shape, device=dev, dtype=bf, generator=gen)

    offs = torch.tensor(gm, dtype=torch.int64, device=dev).cumsum(0).to(torch.int32)
    res = metadata(torch)
    res.update({"bench": "torch_grouped_mm", "sizes_source": source, "num_groups": G, "total_rows": total,
                "empty_groups": sum(1 for v in gm if v == 0), "group_m": gm, "data": args.data, "warmup": args.warmup,
                "reps": args.reps, "results": []})
    print(f"torch._grouped_mm vs dense torch.mm on {res['gpu']}, torch {res['torch']}: {G} groups, {total} rows "
          f"({res['empty_groups']} empty); sizes from {source}; {args.data} data")
    print(f"  {'case':<14} {'N':>6} {'K':>6} {'grouped ms':>11} {'TFLOP/s':>9} {'dense ms':>9} {'TFLOP/s':>9} "
          f"{'grouped/dense':>13}")
    for name, N, K in cases:
        a = fill(total, K)
        b = fill(G, K, N)
        b, layout = grouped_b(torch, a, b, offs)
        out = torch._grouped_mm(a, b, offs=offs, out_dtype=bf)
        torch.cuda.synchronize()
        rel = check_grouped(torch, a, b, offs, out, G, name)
        del out
        t_g = time_ms(torch, lambda: torch._grouped_mm(a, b, offs=offs, out_dtype=bf), args.warmup, args.reps)
        del b
        bd = fill(K, N)  # dense: same total M, one [K, N] weight
        t_d = time_ms(torch, lambda: torch.mm(a, bd), args.warmup, args.reps)
        del a, bd
        torch.cuda.empty_cache()
        flops = 2.0 * total * N * K
        row = {"case": name, "m_total": total, "n": N, "k": K, "b_layout": layout,
               "grouped_ms": t_g, "grouped_tflops": flops / (t_g * 1e-3) / 1e12,
               "dense_ms": t_d, "dense_tflops": flops / (t_d * 1e-3) / 1e12,
               "grouped_over_dense": t_d / t_g, "rel_err_vs_mm": rel}
        res["results"].append(row)
        print(f"  {name:<14} {N:>6} {K:>6} {t_g:>11.3f} {row['grouped_tflops']:>9.1f} {t_d:>9.3f} "
              f"{row['dense_tflops']:>9.1f} {row['grouped_over_dense']:>13.3f}")
    write_json(args.json, res)


def write_json(path, obj):
    if not path:
        return
    d = os.path.dirname(path)
    if d:
        os.makedirs(d, exist_ok=True)
    with open(path, "w") as f:
        json.dump(obj, f, indent=2)
        f.write("\n")
    print(f"  written {path}")


def add_moe_args(ap, routing_help, json_help):
    """The options of the MoE baselines (this file's `moe` and bench/torch_moe_ep.py)."""
    ap.add_argument("--routing", required=True, help=routing_help)
    ap.add_argument("--json", help=json_help)
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--backward", action="store_true", help="also time the autograd backward and fwd+bwd step")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("moe", help="unfused eager torch MoE forward on a kosmos routing dump")
    add_moe_args(m, "JSON from `kosmos bench moe --dump-routing PATH`", "write results here")
    m.set_defaults(fn=cmd_moe)
    g = sub.add_parser("grouped-gemm", help="torch._grouped_mm vs dense torch.mm on issue 3's grouped case")
    src = g.add_mutually_exclusive_group(required=True)
    src.add_argument("--sizes", help="JSON from `gemm_engine_bench --dump-groups PATH` (same group sizes)")
    src.add_argument("--deepseek", action="store_true", help="synthetic sizes (NOT gemm_engine_bench's)")
    g.add_argument("--json", help="write results here")
    g.add_argument("--reps", type=int, default=30)
    g.add_argument("--warmup", type=int, default=5)
    g.add_argument("--seed", type=int, default=0)
    g.add_argument("--data", choices=["normal", "uniform"], default="normal",
                   help="operand values: torch.randn (default) or uniform in [-1, 1) as gemm_engine_bench fills them")
    g.set_defaults(fn=cmd_grouped)
    args = ap.parse_args()
    if args.reps < 3 or args.warmup < 0:
        die("--reps must be >= 3 and --warmup >= 0")
    args.fn(args)


if __name__ == "__main__":
    main()
