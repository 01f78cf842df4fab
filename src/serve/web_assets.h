// The web page `tensorpc serve` answers at / (a chat and a view of the
// cluster), compiled into the binary so the server needs no files beside it.
//
// The sources are src/serve/web/{index.html,style.css,chats.js,tokens.js,
// app.js}; the build turns them into a C++ file of byte arrays
// (cmake/embed_files.cmake), so editing a page file and rebuilding is enough. Each asset is served at its
// path with its content type, unchanged; the page loads nothing from
// elsewhere (no CDN, no external fonts).
#pragma once

#include <span>
#include <string_view>

namespace tensorpc::serve {

struct WebAsset {
  std::string_view path;          // "/", "/style.css", "/app.js", ...
  std::string_view content_type;  // e.g. "text/html; charset=utf-8"
  std::string_view body;          // the file's bytes
};

// Every asset, in a fixed order; the views live as long as the program.
std::span<const WebAsset> web_assets();

}  // namespace tensorpc::serve
