// The web page compiled into `tensorpc serve` (serve/web_assets.h): the
// page, its styles and its script at their paths with their content types,
// byte for byte the files of src/serve/web, and nothing loaded from another
// site (the page must work on a cluster with no way out).
#include "serve/web_assets.h"

#include <gtest/gtest.h>

#include <fstream>
#include <optional>
#include <regex>
#include <sstream>
#include <string>
#include <string_view>

namespace tensorpc::serve {
namespace {

std::optional<WebAsset> asset(std::string_view path) {
  for (const WebAsset& a : web_assets()) {
    if (a.path == path) return a;
  }
  return std::nullopt;
}

std::string source_file(const std::string& name) {
  std::ifstream in(std::string(TENSORPC_SOURCE_DIR) + "/src/serve/web/" + name, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

TEST(WebAssets, ServesThePageItsStylesAndScriptsWithTheirTypes) {
  ASSERT_EQ(web_assets().size(), 5u);
  const struct {
    std::string_view path, type;
  } want[] = {{"/", "text/html; charset=utf-8"},
              {"/style.css", "text/css; charset=utf-8"},
              {"/chats.js", "text/javascript; charset=utf-8"},
              {"/tokens.js", "text/javascript; charset=utf-8"},
              {"/app.js", "text/javascript; charset=utf-8"}};
  for (const auto& w : want) {
    const std::optional<WebAsset> a = asset(w.path);
    ASSERT_TRUE(a) << w.path;
    EXPECT_EQ(a->content_type, w.type) << w.path;
    EXPECT_FALSE(a->body.empty()) << w.path;
  }
}

TEST(WebAssets, EmbedsTheFilesByteForByte) {
  EXPECT_EQ(asset("/")->body, source_file("index.html"));
  EXPECT_EQ(asset("/style.css")->body, source_file("style.css"));
  for (const char* script : {"chats.js", "tokens.js", "app.js"}) {
    EXPECT_EQ(asset(std::string("/") + script)->body, source_file(script)) << script;
  }
}

TEST(WebAssets, PageLoadsItsStylesAndScriptsFromThisServer) {
  const std::string html(asset("/")->body);
  EXPECT_NE(html.find("href=\"/style.css\""), std::string::npos);
  for (const char* script : {"/chats.js", "/tokens.js", "/app.js"}) {
    EXPECT_NE(html.find(std::string("src=\"") + script + "\""), std::string::npos) << script;
  }
}

TEST(WebAssets, LoadsNothingFromAnotherSite) {
  // An absolute or protocol-relative URL in src=, href=, CSS url() or @import.
  const std::regex external(R"re(((src|href)\s*=|url\(|@import)\s*["']?\s*(https?:)?//)re", std::regex::icase);
  for (const WebAsset& a : web_assets()) {
    const std::string body(a.body);
    std::smatch m;
    EXPECT_FALSE(std::regex_search(body, m, external)) << a.path << " loads " << m.str();
  }
}

}  // namespace
}  // namespace tensorpc::serve
