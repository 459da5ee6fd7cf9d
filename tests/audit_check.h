// Protocol check shared by the CPU and GPU runtime tests: every task ran exactly `runs` times and,
// in the last run, started only after enough of its counters' signallers had ended.
#pragma once

#include <string>
#include <vector>

#include "kosmos/plan.h"
#include "kosmos/runtime_types.h"

namespace kosmos::test {

// Returns "" when the audit is consistent, else the first violation.
inline std::string check_audit(const plan::Plan& p, const std::vector<runtime::AuditRecord>& audit, uint32_t runs) {
  if (audit.size() != p.tasks.size()) return "audit size mismatch";
  // signallers per (rank, counter), as (amount, end_seq)
  std::vector<std::vector<std::pair<uint32_t, uint64_t>>> sig(size_t(p.world) * p.num_counters);
  for (size_t i = 0; i < p.tasks.size(); ++i) {
    const plan::Task& t = p.tasks[i];
    if (audit[i].runs != runs)
      return "task " + std::to_string(t.id) + " ran " + std::to_string(audit[i].runs) + " times, expected " + std::to_string(runs);
    if (audit[i].end_seq <= audit[i].start_seq) return "task " + std::to_string(t.id) + " ended before it started";
    for (uint32_t s = 0; s < t.num_signals; ++s) {
      const plan::Signal& sg = p.signals[t.first_signal + s];
      sig[size_t(sg.rank) * p.num_counters + sg.counter].push_back({sg.amount, audit[i].end_seq});
    }
  }
  for (size_t i = 0; i < p.tasks.size(); ++i) {
    const plan::Task& t = p.tasks[i];
    for (uint32_t w = 0; w < t.num_waits; ++w) {
      const plan::Wait& wt = p.waits[t.first_wait + w];
      const size_t slot = size_t(t.rank) * p.num_counters + wt.counter;
      uint64_t arrived = p.external_totals.empty() ? 0 : p.external_totals[slot];
      for (auto [amount, end] : sig[slot])
        if (end < audit[i].start_seq) arrived += amount;
      if (arrived < wt.value())
        return "task " + std::to_string(t.id) + " started (seq " + std::to_string(audit[i].start_seq) + ") when only " +
               std::to_string(arrived) + " of " + std::to_string(wt.value()) + " had arrived on counter " +
               std::to_string(wt.counter);
    }
  }
  return "";
}

}  // namespace kosmos::test
