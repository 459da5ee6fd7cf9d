// Readable plan dump for `kosmos plan --dump`.
#include <iomanip>
#include <sstream>

#include "kosmos/plan.h"

namespace kosmos::plan {

namespace {
void dump_args(std::ostream& os, const Task& t) {
  switch (t.kind) {
    case TaskKind::kSpin: os << " ns=" << t.args<SpinArgs>().ns; break;
    case TaskKind::kCopy: {
      auto a = t.args<CopyArgs>();
      os << " buf" << a.src_buffer << "@r" << a.src_rank << "+" << a.src_offset << " -> buf" << a.dst_buffer << "@r"
         << a.dst_rank << "+" << a.dst_offset << " bytes=" << a.bytes;
      break;
    }
    case TaskKind::kChecksum: {
      auto a = t.args<ChecksumArgs>();
      os << " buf" << a.src_buffer << "@r" << a.src_rank << "[" << a.offset << ", +" << a.bytes << ") -> buf"
         << a.out_buffer << "@r" << a.out_rank << "+" << a.out_offset;
      break;
    }
    case TaskKind::kGemmTile:  // GemmTileArgs {problem, tile_m, tile_n, count} (kernels/gemm/gemm_params.h)
      os << " problem " << t.arg[0] << " m-block " << t.arg[1];
      if (t.arg[3] > 1) os << "+" << (t.arg[3] - 1);  // streamed, not a temporary string: GCC 12's -Wrestrict false positive
      os << " n-block " << t.arg[2];
      break;
    default: {
      os << " args=";
      for (int i = 0; i < kTaskArgWords; ++i) os << (i ? "," : "") << t.arg[i];
    }
  }
}
}  // namespace

std::string dump(const Plan& plan, size_t max_tasks) {
  std::ostringstream os;
  os << "plan '" << plan.name << "': world " << plan.world << ", " << plan.tasks.size() << " tasks, "
     << plan.num_counters << " counters per rank, " << plan.waits.size() << " waits, " << plan.signals.size()
     << " signals, " << plan.buffers.size() << " buffers\n";
  for (size_t b = 0; b < plan.buffers.size(); ++b) {
    const BufferDesc& d = plan.buffers[b];
    os << "  buffer " << b << " '" << d.name << "': " << d.bytes_per_rank << " bytes per rank"
       << (d.external ? " (external)" : "") << "\n";
  }
  os << "  order  task    rank kind        waits (counter>=target)        signals (rank:counter+amount)  payload\n";
  size_t shown = 0;
  for (size_t i = 0; i < plan.tasks.size() && shown < max_tasks; ++i, ++shown) {
    const Task& t = plan.tasks[i];
    std::ostringstream w, s;
    for (uint32_t k = 0; k < t.num_waits; ++k) {
      const Wait& wt = plan.waits[t.first_wait + k];
      w << (k ? " " : "") << "c" << wt.counter << ">=" << wt.value() << (wt.deferred() ? "(in body)" : "");
    }
    for (uint32_t k = 0; k < t.num_signals; ++k) {
      const Signal& sg = plan.signals[t.first_signal + k];
      s << (k ? " " : "") << sg.rank << ":c" << sg.counter << "+" << sg.amount;
    }
    os << "  " << std::setw(5) << i << "  " << std::setw(6) << t.id << "  " << std::setw(4) << t.rank << " "
       << std::left << std::setw(11) << to_string(t.kind) << " " << std::setw(30) << (w.str().empty() ? "-" : w.str())
       << " " << std::setw(30) << (s.str().empty() ? "-" : s.str()) << std::right;
    dump_args(os, t);
    os << "\n";
  }
  if (shown < plan.tasks.size()) os << "  ... " << plan.tasks.size() - shown << " more tasks\n";
  return os.str();
}

}  // namespace kosmos::plan
