// How tensorpc writes a byte count for people: "512 B", "1.5 KiB", "3.2 MiB",
// "2.0 GiB" (binary units, one decimal). One formatter, so that a figure
// reads the same in an error, a listing and a progress line.
#pragma once

#include <string>

namespace tensorpc {

std::string format_bytes(double bytes);

}  // namespace tensorpc
