// Trace export: Chrome-trace JSON (opens in Perfetto / chrome://tracing) and an SVG timeline with
// one lane per SM (or CPU worker), tasks coloured by kind.
#pragma once

#include <string>
#include <vector>

#include "kosmos/plan.h"
#include "kosmos/runtime_types.h"
#include "kosmos/status.h"

namespace kosmos::runtime {

// Records with end_ns == 0 (tasks that did not run) are skipped.
std::string trace_to_chrome_json(const std::vector<TraceRecord>& records, const std::string& title);
std::string trace_to_svg(const std::vector<TraceRecord>& records, const std::string& title, int width_px = 1600);
Status write_trace_files(const std::vector<TraceRecord>& records, const std::string& title,
                         const std::string& json_path, const std::string& svg_path);

// Colour used for a task kind in the SVG (communication kinds warm, compute kinds cool).
const char* kind_colour(plan::TaskKind kind);

}  // namespace kosmos::runtime
