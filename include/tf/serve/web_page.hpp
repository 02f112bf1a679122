#pragma once
/// The chat page at `/`: files compiled into the binary (apps/serve/web/ through
/// cmake/tf_embed_web.cmake) served as they are, with no API key (the page asks for one and
/// sends it to the routes that need it).
#include <httplib.h>

#include <span>
#include <string>
#include <string_view>

namespace tf::serve {

/// One embedded file: its route ("/app.js"), its Content-Type and its bytes.
struct web_asset {
  std::string_view path;
  std::string_view content_type;
  std::string_view bytes;
};

/// Serves each asset at its path and `/index.html` also at `/`.
inline void install_web_page(httplib::Server& http, std::span<web_asset const> assets) {
  for (auto const& a : assets) {
    auto handler = [a](httplib::Request const&, httplib::Response& res) {
      // A rebuilt binary serves a new page: the browser asks again rather than keep an old one.
      res.set_header("Cache-Control", "no-cache");
      // Everything the page loads comes from this server; nothing inline runs.
      res.set_header("Content-Security-Policy",
                     "default-src 'self'; img-src 'self' data:; style-src 'self'; "
                     "script-src 'self'; connect-src 'self'");
      res.set_header("X-Content-Type-Options", "nosniff");
      res.set_content(std::string(a.bytes), std::string(a.content_type));
    };
    std::string pattern;  // httplib routes are regexes: a '.' in a name matches only itself
    for (char c : a.path) pattern += c == '.' ? std::string("\\.") : std::string(1, c);
    http.Get(pattern, handler);
    if (a.path == "/index.html") http.Get("/", handler);
  }
}

}  // namespace tf::serve
