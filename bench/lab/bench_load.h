// The load figures of `tensorpc bench --load-only`: a ~1 GB model (the
// quantized-model figures' random 223 M-parameter llama in f32, bench_quant.h)
// placed from its file on servers in this process, every load from the file
// opened anew with an empty digest memo unless said otherwise:
//  - cold onto one one-device server on loopback whose weights cache has a
//    directory (as `--cache`): GB/s, against ≥ 1 GB/s; its baseline is the
//    same load onto a server without one, this machine's ceiling for it;
//  - warm onto the same server (its cache holds every tensor, the client's
//    memo every digest): the time, against ≤ 0.05× the cold load's;
//  - cold onto two servers, each behind its own emulated link, the uploads
//    at once: the time, against ≤ 1.3× the link's transfer time for the
//    bytes sent to the server that took the most;
//  - onto a server whose `--models` directory has the file (indexed before
//    the load): the bytes sent, against the weights' (only tensors under the
//    cache's 64 KiB go as bytes).
#pragma once

#include <vector>

#include "lab/bench_model.h"
#include "lab/bench_report.h"

namespace tensorpc::tools {

// "load.1g.cold_loopback", "load.1g.warm_loopback", "load.1g.cold_2x_link",
// "load.1g.models_dir.bytes" (and its time, "load.1g.models_dir").
StatusOr<std::vector<Figure>> bench_large_load(const ModelBenchOptions& options);

}  // namespace tensorpc::tools
