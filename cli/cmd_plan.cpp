// kosmos plan: build a plan (random DAG or the sample pipeline), validate it and print it.
#include <iostream>

#include "common.h"
#include "kosmos/tp.h"
#include "runtime/sample_pipeline.h"

namespace kosmos::cli {

void add_plan(CLI::App& app) {
  auto* cmd = app.add_subcommand("plan", "Build, validate and print a plan");
  struct Opts {
    std::string kind = "sample", op = "ag_gemm";
    int64_t m = 1024, n = 1024, k = 1024;
    bool unfused = false;
    uint32_t tasks = 16, fan_in = 3, world = 1, chunks = 4;
    uint64_t seed = 1;
    bool dump = false;
    size_t max_rows = 64;
  };
  auto o = std::make_shared<Opts>();
  cmd->add_option("--kind", o->kind, "Which plan: sample (copy->spin->checksum pipeline), random (DAG) or tp (a fused TP op)")
      ->check(CLI::IsMember({"sample", "random", "tp"}));
  cmd->add_option("--op", o->op, "tp: ag_gemm | gemm_rs | gemm_ar | col_bwd | row_bwd")
      ->check(CLI::IsMember({"ag_gemm", "gemm_rs", "gemm_ar", "col_bwd", "row_bwd"}));
  cmd->add_option("-m", o->m, "tp: tokens M");
  cmd->add_option("-n", o->n, "tp: N of the full layer");
  cmd->add_option("-k", o->k, "tp: K of the full layer");
  cmd->add_flag("--unfused", o->unfused, "tp: the unfused composition (two plans)");
  cmd->add_option("--tasks", o->tasks, "random: number of tasks")->check(CLI::Range(1u, 10000000u));
  cmd->add_option("--fan-in", o->fan_in, "random: maximum dependencies per task")->check(CLI::Range(0u, 64u));
  cmd->add_option("--world", o->world, "Number of (virtual) ranks")->check(CLI::Range(1u, 1024u));
  cmd->add_option("--chunks", o->chunks, "sample: chunks per rank")->check(CLI::Range(1u, 100000u));
  cmd->add_option("--seed", o->seed, "random: seed");
  cmd->add_flag("--dump", o->dump, "Print every task (up to --max-rows)");
  cmd->add_option("--max-rows", o->max_rows, "Rows to print with --dump");
  cmd->callback([o] {
    if (o->kind == "tp") {
      TpConfig c;
      c.op = o->op == "ag_gemm" ? TpOp::kAgGemm : o->op == "gemm_rs" ? TpOp::kGemmRs : o->op == "gemm_ar" ? TpOp::kGemmAr
             : o->op == "col_bwd" ? TpOp::kColParallelBwd : TpOp::kRowParallelBwd;
      c.world = int(o->world);
      c.m = o->m;
      c.n = o->n;
      c.k = o->k;
      c.fused = !o->unfused;
      std::vector<plan::Plan> plans;
      throw_if_error(tp_plans(c, 132, &plans));
      for (const auto& p : plans) std::cout << plan::dump(p, o->dump ? o->max_rows : 0);
      return;
    }
    plan::Plan p;
    if (o->kind == "random") {
      plan::RandomDagOptions ro;
      ro.num_tasks = o->tasks;
      ro.max_fan_in = o->fan_in;
      ro.world = o->world;
      throw_if_error(plan::make_random_dag(ro, o->seed, &p));
    } else {
      throw_if_error(runtime::make_sample_plan(o->world, o->chunks, 4096, 1000, &p));
    }
    std::cout << plan::dump(p, o->dump ? o->max_rows : 0);
  });
}

}  // namespace kosmos::cli
