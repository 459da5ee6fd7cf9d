#!/usr/bin/env python3
"""Expert-parallel PyTorch MoE baseline: the unfused eager pipeline, one process per GPU.

What it measures: the MoE layer of `kosmos bench moe` (same T, H, I, E, k and the same expert ids
and router weights, read from a routing dump) as an expert-parallel torch program runs it without
DeepEP: every rank holds T tokens and L = E / W experts (expert e lives on rank e // L), and per
forward

  stable argsort of the flat expert ids (slots grouped by expert, hence by destination rank),
  counts per (destination, local expert) (a scatter_add: CUDA's bincount would sync the host);
  all_to_all_single of those counts (a small int tensor) and ONE host sync (.tolist()) for the
  split sizes; all_to_all_single of the permuted x rows; regroup of the received rows from
  source-major to expert-major (an index permutation); torch._grouped_mm gate+up with group
  offsets, SwiGLU (silu(gate) * up), torch._grouped_mm down; un-regroup to source-major;
  all_to_all_single back; router-weight scale; un-permute by index_copy; fp32 sum over the k
  slots -> bf16 y [T, H].

The row exchanges use torch.distributed.nn.functional.all_to_all_single (autograd-aware), so
--backward runs autograd through the whole pipeline (dx, d_weights, d_gate_up, d_down from a random
dy; activations saved, nothing recomputed) and also times the forward + backward step. At W = 1 the
all-to-alls still run, on the one-rank group (a local copy), so W = 1 is the same program.
bench/torch_baselines.py `moe` is the single-GPU version without any exchange.

Run (from the repository root on the GPU machine; one process per GPU; W = the routing's world):

  ./build/kosmos bench moe --world W --dump-routing R.json   # needs no GPU
  python3 -m torch.distributed.run --standalone --nproc-per-node W bench/torch_moe_ep.py \\
      --routing R.json --json OUT.json [--backward] [--reps 20] [--warmup 5]

Compared with: `kosmos bench moe --transport nccl` (one process per GPU) on the same routing.
x and the expert weights are random bf16 here (their values need not match kosmos's; the work does):
per rank, torch.Generator streams seeded from (--seed, rank, tensor); gate_up [L, H, 2I] plain
[gate | up] scaled by 1/sqrt(H), down [L, I, H] scaled by 1/sqrt(I), as in torch_baselines.py.

Verification before timing, on every rank (the verdict is all-reduced, so all ranks fail together):
y finite, rows received == rows the file routes to this rank, and tokens 0, T/2, T-1 of every rank
against an fp32 per-slot reference. Each expert's owner computes the reference of the checked slots
routed to it (the checked x rows are all-gathered; no expert weights move) and an all-reduce brings
the per-slot results back. With --backward, dx of those tokens against fp32 autograd likewise. Tolerance 3e-2 relative, as in torch_baselines.py.

Timing: per repetition a barrier (all_reduce of one int), then CUDA events around the forward (the
host sync mid-way counts, as in use); with --backward, events around y.backward(dy) with the forward
outside the timed span, and around the full forward + backward step. --warmup warm-ups, median of
--reps per rank; reported: the max over ranks of the per-rank medians (the per-rank medians too).
FLOPs = 2 * W*T*k * (H*2I + I*H) for the whole layer. NVLink multicast stays off:
NCCL_NVLS_ENABLE=0 is set before NCCL starts (another value in the environment is an error).

--cpu: a LOGIC TEST, never a benchmark: gloo on the CPU, a per-group matmul loop instead of
torch._grouped_mm, float32 if bf16 matmul is unsupported; it also checks y and (with --backward) all
gradients of every rank against one direct, non-distributed computation in float64.
"""

import argparse
import json
import math
import os
import platform
import shlex
import statistics
import sys
import time
import warnings

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_baselines as tb  # noqa: E402  (die, need_torch, metadata, grouped_b, write_json)

BENCH = "torch_moe_ep_unfused"
TOL = 3e-2  # relative, as torch_baselines.py
DENSE_CHECK_BYTES = 512e6  # --cpu: largest all-expert float64 weight set the non-distributed check builds
STREAMS = {"x": 0, "gate_up": 1, "down": 2, "dy": 3}  # one generator stream per (seed, rank, tensor)
PIPELINE = ("argsort(stable) permute, expert counts (scatter_add; bincount would sync), all_to_all_single of the "
            "counts + one host sync (.tolist()) for the split sizes, all_to_all_single of the x rows, regroup "
            "source-major -> expert-major (argsort of the received rows' local expert), torch._grouped_mm gate+up, "
            "SwiGLU, torch._grouped_mm down, un-regroup (index_copy), all_to_all_single back, router-weight scale, "
            "index_copy un-permute, fp32 sum over k; eager")


# ---------------------------------------------------------------------------------------------
# launch and inputs


def die_input(rank, msg):
    """An error every rank hits identically (same file, same env): print it once, exit everywhere."""
    if rank == 0:
        tb.die(f"torch_moe_ep: {msg}")
    sys.exit(2)


def launch_env():
    """RANK / WORLD_SIZE / LOCAL_RANK from torchrun, and NVLink multicast forced off before NCCL starts."""
    missing = [n for n in ("RANK", "WORLD_SIZE", "LOCAL_RANK") if n not in os.environ]
    if missing:
        tb.die(f"torch_moe_ep: {', '.join(missing)} not set: launch one process per GPU with "
               f"python3 -m torch.distributed.run --standalone --nproc-per-node W {sys.argv[0]} --routing R.json ...")
    rank, world, local = (int(os.environ[n]) for n in ("RANK", "WORLD_SIZE", "LOCAL_RANK"))
    nvls = os.environ.get("NCCL_NVLS_ENABLE")
    if nvls is not None and nvls != "0":
        die_input(rank, f"NCCL_NVLS_ENABLE={nvls} in the environment: this project never uses NVLink multicast "
                        "(unset it or set it to 0)")
    os.environ["NCCL_NVLS_ENABLE"] = "0"
    return rank, world, local


def load_routing(path, world, rank):
    """The kosmos routing dump, validated: shapes, world == WORLD_SIZE, no dropped slots."""
    try:
        with open(path) as f:
            r = json.load(f)
    except FileNotFoundError:
        die_input(rank, f"{path}: no such file (write it with `kosmos bench moe --world W --dump-routing {path}`)")
    except (OSError, ValueError) as e:
        die_input(rank, f"{path}: cannot read it as JSON ({e})")
    if not isinstance(r, dict) or r.get("format") != "kosmos-moe-routing-v1":
        fmt = r.get("format") if isinstance(r, dict) else type(r).__name__
        die_input(rank, f"{path}: not a routing file of `kosmos bench moe --dump-routing` (format {fmt!r})")
    try:
        W, T, H, I, E, k = (int(r[key]) for key in ("world", "tokens", "hidden", "intermediate", "experts", "top_k"))
        ranks = r["ranks"]
    except (KeyError, TypeError, ValueError) as e:
        die_input(rank, f"{path}: missing or bad shape key ({e})")
    if W != world:
        die_input(rank, f"{path}: the routing is for world = {W} but WORLD_SIZE = {world}: run with "
                        f"--nproc-per-node {W}, or dump the routing with --world {world}")
    if min(T, H, I, E, k) < 1 or E % W or k > E:
        die_input(rank, f"{path}: bad shape T={T} H={H} I={I} E={E} k={k} W={W} (E must be a multiple of W, k <= E)")
    if not isinstance(ranks, list) or len(ranks) != W or any(int(x.get("rank", -1)) != i for i, x in enumerate(ranks)):
        die_input(rank, f"{path}: 'ranks' must list ranks 0..{W - 1} in order")
    L = E // W
    recv_rows = [0] * W  # rows each rank must receive, for the check of the exchange
    for i, x in enumerate(ranks):  # every rank checks the whole file: identical verdicts everywhere
        ids, wts = x.get("ids"), x.get("weights")
        if not isinstance(ids, list) or not isinstance(wts, list) or len(ids) != T * k or len(wts) != T * k:
            die_input(rank, f"{path}: rank {i} needs T*k = {T * k} ids and weights")
        if any(not 0 <= e < E for e in ids):
            die_input(rank, f"{path}: rank {i} drops slots (ids outside [0, {E})): dropped slots are unsupported "
                            "by this baseline")
        for e in ids:
            recv_rows[e // L] += 1
    return {"file": path, "raw": r, "W": W, "T": T, "H": H, "I": I, "E": E, "k": k, "L": L, "recv_rows": recv_rows}


def start(args, rank, world, local):
    """torch, the process group (nccl on this rank's GPU, or gloo on the CPU for --cpu), device, dtype."""
    if args.cpu:
        try:
            import torch
        except ImportError as e:
            tb.die(f"torch_moe_ep: cannot import torch ({e})")
        import torch.distributed as dist
        dev = torch.device("cpu")
        dist.init_process_group("gloo")
        try:  # bf16 as on the GPU when the CPU build multiplies it, else float32 (logic test only)
            torch.ones(2, 2, dtype=torch.bfloat16) @ torch.ones(2, 2, dtype=torch.bfloat16)
            dt = torch.bfloat16
        except RuntimeError:
            dt = torch.float32
    else:
        torch = tb.need_torch()
        import torch.distributed as dist
        if local >= torch.cuda.device_count():
            die_input(rank, f"LOCAL_RANK={local} but only {torch.cuda.device_count()} GPU(s) are visible")
        torch.cuda.set_device(local)
        dev = torch.device("cuda", local)
        dist.init_process_group("nccl", device_id=dev)
        dt = torch.bfloat16
    # the autograd-aware all_to_all_single is deprecated in newer torch; it is what this baseline uses
    warnings.filterwarnings("ignore", message=r"torch\.distributed\.nn\.functional\..* is deprecated")
    return torch, dist, dev, dt


def generator(torch, dev, seed, rank, what):
    """The stream of one tensor of one rank: reproducible anywhere from (seed, rank, tensor)."""
    g = torch.Generator(device=dev)
    g.manual_seed((seed * 4096 + rank) * len(STREAMS) + STREAMS[what])
    return g


def make_inputs(torch, dev, dt, seed, rank, R):
    """x [T, H], gate_up [L, H, 2I] (plain [gate | up]), down [L, I, H] of one rank."""
    T, H, I, L = R["T"], R["H"], R["I"], R["L"]
    x = torch.randn(T, H, device=dev, dtype=dt, generator=generator(torch, dev, seed, rank, "x"))
    gu = (torch.randn(L, H, 2 * I, device=dev, dtype=dt, generator=generator(torch, dev, seed, rank, "gate_up"))
          * (1.0 / math.sqrt(H))).to(dt)
    dn = (torch.randn(L, I, H, device=dev, dtype=dt, generator=generator(torch, dev, seed, rank, "down"))
          * (1.0 / math.sqrt(I))).to(dt)
    return x, gu, dn


def make_dy(torch, dev, dt, seed, rank, R):
    return torch.randn(R["T"], R["H"], device=dev, dtype=dt, generator=generator(torch, dev, seed, rank, "dy"))


# ---------------------------------------------------------------------------------------------
# the pipeline


def grouped_mm_fn(torch, cpu, dt):
    """(a [M, K], b [G, K, N], device group ends, host group sizes) -> [M, N]."""
    if cpu:
        def loop(a, b, offs, sizes):  # the --cpu stand-in for torch._grouped_mm: one matmul per group
            outs, r0 = [], 0
            for g, n in enumerate(sizes):  # empty groups too: b stays in the graph (zero grads)
                outs.append(a[r0:r0 + n] @ b[g])
                r0 += n
            return torch.cat(outs)
        return loop

    def grouped(a, b, offs, sizes):
        if a.shape[0] == 0:  # nothing received: an empty product that keeps b in the graph
            return a @ b[0]
        return torch._grouped_mm(a, b, offs=offs, out_dtype=dt)
    return grouped


def make_forward(torch, dist, dev, dt, R, ids, grouped, stats):
    """The per-rank EP forward as a function of the autograd leaves (x, gate_up, down, weights)."""
    import torch.distributed.nn.functional as dnf

    W, T, H, I, E, k, L = (R[n] for n in ("W", "T", "H", "I", "E", "k", "L"))
    local_of_row = torch.arange(L, device=dev).repeat(W)  # (source, local expert) -> local expert

    def exchange(rows, out_splits, in_splits):
        out = rows.new_empty(sum(out_splits), H)
        return dnf.all_to_all_single(out, rows, out_splits, in_splits)

    def forward(x, gu, dn, wts):
        flat = ids.view(-1)
        order = torch.argsort(flat, stable=True)                  # slots by expert = by destination rank
        # rows per (destination, its local expert); scatter_add, not bincount: CUDA bincount syncs the host
        send = torch.zeros(E, dtype=torch.int64, device=dev).scatter_add_(0, flat, torch.ones_like(flat)).view(W, L)
        recv = torch.empty_like(send)
        dist.all_to_all_single(recv, send)                        # -> rows per (source, my local expert)
        host = torch.cat([send.sum(1), recv.view(-1)]).tolist()   # the one host sync: split sizes
        in_splits, recv_h = host[:W], host[W:]
        out_splits = [sum(recv_h[s * L:(s + 1) * L]) for s in range(W)]
        n_recv = sum(out_splits)
        sizes = [sum(recv_h[s * L + e] for s in range(W)) for e in range(L)]  # rows per local expert
        stats.update(rows_sent=T * k, rows_sent_remote=T * k - in_splits[dist.get_rank()], rows_received=n_recv)

        xs = x.index_select(0, order // k)                        # permute
        xr = exchange(xs, out_splits, in_splits)                  # [n_recv, H], source-major
        row_expert = torch.repeat_interleave(local_of_row, recv.view(-1), output_size=n_recv)
        regroup = torch.argsort(row_expert, stable=True)          # expert-major, sources in order
        offs = torch.cumsum(recv.sum(0), 0, dtype=torch.int32)    # group ends
        xe = xr.index_select(0, regroup)
        h = grouped(xe, gu, offs, sizes)                          # [n_recv, 2I]
        gate, up = h.split(I, dim=-1)
        a = torch.nn.functional.silu(gate) * up                   # SwiGLU
        o = grouped(a, dn, offs, sizes)                           # [n_recv, H]
        o = torch.zeros_like(o).index_copy(0, regroup, o)         # un-regroup: source-major again
        ob = exchange(o, in_splits, out_splits)                   # [T*k, H], in `order`
        ob = ob * wts.view(-1).index_select(0, order).to(dt).unsqueeze(1)  # router-weight scale
        slots = torch.zeros_like(ob).index_copy(0, order, ob)     # un-permute (unique indices)
        return slots.view(T, k, H).sum(dim=1, dtype=torch.float32).to(dt)  # k slots, fixed order

    return forward


def pick_layouts(torch, dev, dt, R, gu, dn):
    """The 3-D operand layouts torch._grouped_mm accepts, probed once outside timing (tb.grouped_b)."""
    L, H, I = R["L"], R["H"], R["I"]
    offs = torch.arange(1, L + 1, device=dev, dtype=torch.int32)  # one probe row per group
    gu, gu_layout = tb.grouped_b(torch, torch.zeros(L, H, device=dev, dtype=dt), gu, offs)
    dn, dn_layout = tb.grouped_b(torch, torch.zeros(L, I, device=dev, dtype=dt), dn, offs)
    return gu, dn, gu_layout, dn_layout


# ---------------------------------------------------------------------------------------------
# verification


def gather(torch, dist, t):
    """all_gather of a same-shape tensor -> [W, *t.shape]."""
    out = [torch.empty_like(t) for _ in range(dist.get_world_size())]
    dist.all_gather(out, t.contiguous())
    return torch.stack(out)


def rel_err(torch, got, ref):
    num = (got.double() - ref.double()).pow(2).sum().item()
    den = ref.double().pow(2).sum().item()
    return math.sqrt(num / max(den, 1e-30))


def slot_reference(torch, dist, R, tok, x, gu, dn, ids, wts, dy):
    """fp32 references for tokens `tok` of every rank, each slot computed by its expert's owner.

    Returns (y_ref [C, H], dx_ref [C, H] or None) for this rank's tokens. The checked x (and dy) rows
    are all-gathered; each rank evaluates the slots routed to its own experts (per slot: SwiGLU(x @
    gate_up) @ down in fp32, and with dy the fp32 autograd dx, weighted); an all-reduce returns them.
    """
    rank, W, L, I, H, k = dist.get_rank(), R["W"], R["L"], R["I"], R["H"], R["k"]
    C = len(tok)
    X = gather(torch, dist, x[tok]).view(W * C, H)
    IDS = gather(torch, dist, ids[tok]).view(-1)                 # [W*C*k]
    WTS = gather(torch, dist, wts[tok]).view(-1)
    DY = gather(torch, dist, dy[tok]).view(W * C, H) if dy is not None else None
    part_y = torch.zeros(W * C * k, H, device=x.device, dtype=torch.float32)
    part_dx = torch.zeros_like(part_y)
    for e in sorted({int(v) for v in IDS.tolist() if int(v) // L == rank}):
        sel = (IDS == e).nonzero().view(-1)                      # slots (over all ranks) on expert e
        rows = sel // k
        xr = X[rows].float().requires_grad_(DY is not None)
        h = xr @ gu[e - rank * L].float()
        out = (torch.nn.functional.silu(h[:, :I]) * h[:, I:]) @ dn[e - rank * L].float()
        part_y[sel] = out.detach()
        if DY is not None:
            out.backward(DY[rows].float() * WTS[sel].float().unsqueeze(1))
            part_dx[sel] = xr.grad
    dist.all_reduce(part_y)                                     # each slot has exactly one owner
    mine = part_y.view(W, C, k, H)[rank]
    y_ref = (mine * wts[tok].float().unsqueeze(-1)).sum(1)
    dx_ref = None
    if DY is not None:
        dist.all_reduce(part_dx)
        dx_ref = part_dx.view(W, C, k, H)[rank].sum(1)
    return y_ref, dx_ref


def agree(torch, dist, dev, ok, values, what, names):
    """All-reduce a verdict: every rank learns every rank's numbers, all fail together."""
    row = torch.tensor([1.0 if ok else 0.0] + list(values), dtype=torch.float64, device=dev)
    table = gather(torch, dist, row).tolist()
    if all(r[0] == 1.0 for r in table):
        return table
    if dist.get_rank() == 0:
        lines = "; ".join(f"rank {i}: " + ", ".join(f"{n} {v:.4g}" for n, v in zip(names, r[1:]))
                          + ("" if r[0] == 1.0 else " FAIL") for i, r in enumerate(table))
        print(f"torch_moe_ep: error: {what} failed (tolerance {TOL:g} relative): {lines}", file=sys.stderr)
    finish(dist)
    sys.exit(2)


def finish(dist):
    dist.barrier()  # nobody tears the group down while a peer still uses it
    dist.destroy_process_group()


def check_forward(torch, dist, dev, R, tok, y, x, gu, dn, ids2, wts2, rows_received):
    """y finite, the rows received as the routing says, checked tokens vs the fp32 per-slot reference."""
    finite = bool(torch.isfinite(y.float()).all())
    want = R["recv_rows"][dist.get_rank()]
    y_ref, _ = slot_reference(torch, dist, R, tok, x, gu, dn, ids2, wts2, None)
    rel = rel_err(torch, y[tok], y_ref) if finite else float("inf")
    table = agree(torch, dist, dev, finite and rel < TOL and rows_received == want, [rel, rows_received, want],
                  "forward (y finite, rows received as routed, y vs fp32 per-slot reference)",
                  ["rel.err", "rows received", "rows routed here"])
    return [r[1] for r in table]


def check_backward(torch, dist, dev, R, tok, forward, x, gu, dn, wts, ids2, dy):
    """One autograd pass through the pipeline; dx of the checked tokens vs fp32 autograd."""
    lv = [t.detach().requires_grad_(True) for t in (x, gu, dn, wts)]
    forward(*lv).backward(dy)
    grads_ok = all(t.grad is not None and bool(torch.isfinite(t.grad.float()).all()) for t in lv)
    _, dx_ref = slot_reference(torch, dist, R, tok, x, gu, dn, ids2, wts.view(R["T"], R["k"]), dy)
    rel = rel_err(torch, lv[0].grad[tok], dx_ref) if grads_ok else float("inf")
    table = agree(torch, dist, dev, grads_ok and rel < TOL, [rel],
                  "backward (gradients present and finite; dx vs fp32 autograd reference)", ["dx rel.err"])
    return [r[1] for r in table], lv


def check_dense_cpu(torch, dist, dev, dt, args, R, y, lv):
    """--cpu only: y and (with --backward) every gradient against one non-distributed float64 computation.

    Every rank rebuilds all ranks' inputs (the CPU generator is reproducible) and runs the whole layer
    as plain per-slot math with autograd, so the all-to-all forward and backward are checked end to end.
    """
    W, T, H, I, E, k, L = (R[n] for n in ("W", "T", "H", "I", "E", "k", "L"))
    rank = dist.get_rank()
    if E * H * 3 * I * 8 > DENSE_CHECK_BYTES:  # all experts in float64 on every rank: tiny files only
        if rank == 0:
            print(f"torch_moe_ep: note: --cpu non-distributed check skipped (all weights in float64 would take "
                  f"{E * H * 3 * I * 8 / 1e9:.1f} GB per rank; limit {DENSE_CHECK_BYTES / 1e9:.1f} GB)",
                  file=sys.stderr)
        return {"skipped": "weights too large for the float64 check"}
    ins = [make_inputs(torch, dev, dt, args.seed, r, R) for r in range(W)]
    X = torch.cat([i[0] for i in ins]).double().requires_grad_(True)        # [W*T, H]
    GU = torch.cat([i[1] for i in ins]).double().requires_grad_(True)       # [E, H, 2I]
    DN = torch.cat([i[2] for i in ins]).double().requires_grad_(True)       # [E, I, H]
    raw = R["raw"]["ranks"]
    ids = torch.tensor([e for r in raw for e in r["ids"]], dtype=torch.int64)
    WT = torch.tensor([w for r in raw for w in r["weights"]], dtype=torch.float64).requires_grad_(True)
    token = torch.arange(W * T * k) // k                                   # slot -> global token
    Y = torch.zeros(W * T, H, dtype=torch.float64)
    for e in range(E):                                                      # plain math, expert by expert
        sel = (ids == e).nonzero().view(-1)
        h = X[token[sel]] @ GU[e]
        out = ((torch.nn.functional.silu(h[:, :I]) * h[:, I:]) @ DN[e]) * WT[sel].unsqueeze(1)
        Y = Y.index_add(0, token[sel], out)
    mine = slice(rank * T, (rank + 1) * T)
    errs = {"y": rel_err(torch, y, Y[mine].detach())}
    if lv is not None:
        Y.backward(torch.cat([make_dy(torch, dev, dt, args.seed, r, R) for r in range(W)]).double())
        ex = slice(rank * L, (rank + 1) * L)
        errs.update(dx=rel_err(torch, lv[0].grad, X.grad[mine]), d_gate_up=rel_err(torch, lv[1].grad, GU.grad[ex]),
                    d_down=rel_err(torch, lv[2].grad, DN.grad[ex]),
                    d_weights=rel_err(torch, lv[3].grad, WT.grad[rank * T * k:(rank + 1) * T * k]))
    ok = all(v < TOL for v in errs.values())
    table = agree(torch, dist, dev, ok, list(errs.values()), "--cpu check against the direct non-distributed float64 "
                  "computation", list(errs))
    return {n: max(r[1 + i] for r in table) for i, n in enumerate(errs)}


# ---------------------------------------------------------------------------------------------
# timing


def make_timer(torch, dist, dev, cpu):
    """One repetition: barrier (all_reduce of one int), then CUDA events (or, --cpu, a wall clock) around fn."""
    one = torch.ones(1, dtype=torch.int32, device=dev)

    def rep(fn):
        dist.all_reduce(one, op=dist.ReduceOp.MAX)
        if cpu:
            t0 = time.perf_counter()
            fn()
            return (time.perf_counter() - t0) * 1e3
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        fn()
        e.record()
        e.synchronize()
        return s.elapsed_time(e)
    return rep


def median_ms(rep, fn, warmup, reps, before=None):
    """Median of reps timed repetitions after warmup ones; `before` runs untimed ahead of each."""
    times = []
    for i in range(warmup + reps):
        arg = before() if before else None
        t = rep((lambda: fn(arg)) if before else fn)
        if i >= warmup:
            times.append(t)
    return statistics.median(times)


def time_all(torch, rep, args, forward, x, gu, dn, wts, dy):
    """Per-rank medians: forward; with --backward also backward alone and the fwd+bwd step."""
    out = {"forward": median_ms(rep, lambda: forward(x, gu, dn, wts), args.warmup, args.reps)}
    if args.backward:
        def leaves():
            return [t.detach().requires_grad_(True) for t in (x, gu, dn, wts)]

        def fresh_forward():  # outside the timed span
            return forward(*leaves())
        out["backward"] = median_ms(rep, lambda y: y.backward(dy), args.warmup, args.reps, before=fresh_forward)
        lv = leaves()
        out["fwd_bwd"] = median_ms(rep, lambda: forward(*lv).backward(dy), args.warmup, args.reps)
    return out


# ---------------------------------------------------------------------------------------------
# report


def cpu_metadata(torch):
    return {"gpu": None, "device": "cpu (LOGIC TEST, not a benchmark)", "torch": torch.__version__,
            "python": platform.python_version(), "commit": tb.git_commit(),
            "command": "python3 " + " ".join(shlex.quote(a) for a in sys.argv),
            "time": time.strftime("%Y-%m-%dT%H:%M:%S%z")}


def nccl_version(torch):
    try:
        v = torch.cuda.nccl.version()
        return ".".join(str(p) for p in v) if isinstance(v, tuple) else str(v)
    except Exception:  # noqa: BLE001 - metadata only
        return None


def build_result(torch, args, R, dt, layouts, stats_table, times_table, rel):
    W, T, H, I, E, k = (R[n] for n in ("W", "T", "H", "I", "E", "k"))
    names = list(times_table[0])
    per_rank = {n: [row[n] for row in times_table] for n in names}
    worst = {n: max(v) for n, v in per_rank.items()}
    flops = 2.0 * W * T * k * (H * 2 * I + I * H)
    res = cpu_metadata(torch) if args.cpu else tb.metadata(torch)
    res.update({
        "bench": BENCH + ("_cpu_logic_test" if args.cpu else ""),
        "logic_test_only": bool(args.cpu),
        "launcher": "torch.distributed.run, " + (f"{W} CPU processes (gloo)" if args.cpu else "one process per GPU"),
        "backend": "gloo" if args.cpu else "nccl",
        "nccl_version": None if args.cpu else nccl_version(torch),
        "nccl_nvls_enable": os.environ.get("NCCL_NVLS_ENABLE"),
        "routing_file": R["file"], "routing_command": R["raw"].get("command"),
        "model": R["raw"].get("model"), "routing": R["raw"].get("routing"),
        "world": W, "tokens": T, "hidden": H, "intermediate": I, "experts": E, "top_k": k, "local_experts": R["L"],
        "dtype": str(dt).replace("torch.", ""),
        "rows_sent_per_rank": [s["rows_sent"] for s in stats_table],
        "rows_sent_to_other_ranks_per_rank": [s["rows_sent_remote"] for s in stats_table],
        "rows_received_per_rank": [s["rows_received"] for s in stats_table],
        "compared_with": "kosmos bench moe --transport nccl (one process per GPU) on the same routing file",
        "pipeline": PIPELINE,
        "exchange": "torch.distributed.nn.functional.all_to_all_single (autograd-aware) for the x / output rows; "
                    "torch.distributed.all_to_all_single for the counts",
        "w1_exchange": "the all-to-alls run at W = 1 too (one-rank group: a local copy)",
        "grouped_mm": "per-group matmul loop (--cpu stand-in)" if args.cpu else "torch._grouped_mm",
        "gate_up_layout": layouts[0], "down_layout": layouts[1],
        "inputs": "random, torch.Generator per (seed, rank, tensor); gate_up * 1/sqrt(H), down * 1/sqrt(I); "
                  "router ids and weights from the routing file",
        "seed": args.seed, "warmup": args.warmup, "reps": args.reps,
        "timing": "per repetition: barrier (all_reduce of one int), then " +
                  ("wall clock (--cpu)" if args.cpu else "CUDA events") +
                  " around the variant (backward: forward outside the span); median of reps per rank; "
                  "reported: max over ranks",
        "flops": flops,
        "forward_ms": worst["forward"],
        "forward_tflops": None if args.cpu else flops / (worst["forward"] * 1e-3) / 1e12,
        "per_rank_median_ms": per_rank,
        "verification": "every rank: y finite, rows received == rows routed to it, tokens 0, T/2, T-1 vs an fp32 "
                        "per-slot reference computed by each slot's expert owner (x rows all-gathered)"
                        + ("; --backward: dx of those tokens vs fp32 autograd" if args.backward else "")
                        + (f"; tolerance {TOL:g} relative; verdict all-reduced"),
        "rel_err_vs_fp32_reference": max(rel["forward"]),
        "rel_err_vs_fp32_reference_per_rank": rel["forward"],
    })
    if args.backward:
        res.update({
            "backward_ms": worst["backward"], "fwd_bwd_ms": worst["fwd_bwd"],
            "backward_rel_err_dx": max(rel["dx"]), "backward_rel_err_dx_per_rank": rel["dx"],
            "backward_pipeline": "torch autograd through the forward above (activations saved, no recompute; "
                                 "the all-to-alls' backward is the reverse all-to-all); dx, d_weights, d_gate_up, "
                                 "d_down",
        })
    if "dense" in rel:
        res["cpu_check_vs_non_distributed_float64"] = rel["dense"]
    return res


def print_table(res, args):
    label = "LOGIC TEST on the CPU (gloo), NOT a benchmark: " if args.cpu else ""
    print(f"{label}torch MoE EP (unfused, eager) {res['model']} W={res['world']} T={res['tokens']} H={res['hidden']} "
          f"I={res['intermediate']} E={res['experts']} k={res['top_k']} routing={res['routing']} "
          f"on {res['gpu'] or 'cpu'}, torch {res['torch']}, {res['backend']} {res['nccl_version'] or ''}")
    pr = res["per_rank_median_ms"]
    cols = [n for n in ("forward", "backward", "fwd_bwd") if n in pr]
    print(f"  {'rank':>4} {'sent':>8} {'remote':>8} {'recv':>8} " + " ".join(f"{c + ' ms':>12}" for c in cols))
    for r in range(res["world"]):
        print(f"  {r:>4} {res['rows_sent_per_rank'][r]:>8} {res['rows_sent_to_other_ranks_per_rank'][r]:>8} "
              f"{res['rows_received_per_rank'][r]:>8} " + " ".join(f"{pr[c][r]:>12.3f}" for c in cols))
    tflops = "n/a (--cpu)" if res["forward_tflops"] is None else f"{res['forward_tflops']:.1f}"
    line = f"  max over ranks: forward {res['forward_ms']:.3f} ms, {tflops} TFLOP/s"
    if args.backward:
        line += f"; backward {res['backward_ms']:.3f} ms; forward + backward {res['fwd_bwd_ms']:.3f} ms"
    print(line)
    errs = f"  rel.err vs fp32 reference: y {res['rel_err_vs_fp32_reference']:.2e}"
    if args.backward:
        errs += f", dx {res['backward_rel_err_dx']:.2e}"
    if "cpu_check_vs_non_distributed_float64" in res:
        errs += "; vs non-distributed float64: " + ", ".join(
            f"{n} {v:.2e}" if isinstance(v, float) else f"{n}: {v}"
            for n, v in res["cpu_check_vs_non_distributed_float64"].items())
    print(errs)


# ---------------------------------------------------------------------------------------------


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    tb.add_moe_args(ap, "JSON from `kosmos bench moe --world W --dump-routing PATH`", "write results here (rank 0)")
    ap.add_argument("--cpu", action="store_true", help="LOGIC TEST on the CPU with gloo (not a benchmark)")
    args = ap.parse_args()
    if args.reps < 3 or args.warmup < 0:
        tb.die("torch_moe_ep: --reps must be >= 3 and --warmup >= 0")
    return args


def main():
    args = parse_args()
    rank, world, local = launch_env()
    R = load_routing(args.routing, world, rank)
    torch, dist, dev, dt = start(args, rank, world, local)
    T, k = R["T"], R["k"]
    mine = R["raw"]["ranks"][rank]
    ids = torch.tensor(mine["ids"], dtype=torch.int64, device=dev)
    wts = torch.tensor(mine["weights"], dtype=torch.float32, device=dev)
    x, gu, dn = make_inputs(torch, dev, dt, args.seed, rank, R)
    layouts = ("row-major [L, H, 2I] (--cpu)", "row-major [L, I, H] (--cpu)")
    if not args.cpu:
        gu, dn, *layouts = pick_layouts(torch, dev, dt, R, gu, dn)
    stats = {}
    forward = make_forward(torch, dist, dev, dt, R, ids, grouped_mm_fn(torch, args.cpu, dt), stats)

    # verification before timing (all ranks agree on the verdict)
    tok = torch.tensor([0, T // 2, T - 1], device=dev)
    ids2, wts2 = ids.view(T, k), wts.view(T, k)
    y = forward(x, gu, dn, wts)
    rel = {"forward": check_forward(torch, dist, dev, R, tok, y, x, gu, dn, ids2, wts2, stats["rows_received"])}
    dy, lv = None, None
    if args.backward:
        dy = make_dy(torch, dev, dt, args.seed, rank, R)
        rel["dx"], lv = check_backward(torch, dist, dev, R, tok, forward, x, gu, dn, wts, ids2, dy)
    if args.cpu:
        rel["dense"] = check_dense_cpu(torch, dist, dev, dt, args, R, y, lv)

    times = time_all(torch, make_timer(torch, dist, dev, args.cpu), args, forward, x, gu, dn, wts, dy)
    row = [stats["rows_sent"], stats["rows_sent_remote"], stats["rows_received"]] + list(times.values())
    table = gather(torch, dist, torch.tensor(row, dtype=torch.float64, device=dev)).tolist()
    if rank == 0:
        stats_table = [{"rows_sent": int(r[0]), "rows_sent_remote": int(r[1]), "rows_received": int(r[2])}
                       for r in table]
        times_table = [dict(zip(times, r[3:])) for r in table]
        res = build_result(torch, args, R, dt, layouts, stats_table, times_table, rel)
        print_table(res, args)
        tb.write_json(args.json, res)
    finish(dist)


if __name__ == "__main__":
    main()
