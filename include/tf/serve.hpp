#pragma once
/// Serving on top of the engine: the lane host that runs concurrent requests over one model (its
/// admission, drafts and rounds) and `open_served`, which opens a model with its pool sized for
/// that. The HTTP server is `<tf/serve/http_server.hpp>`; `<tf/engine.hpp>` needs none of these.
#include <tf/engine.hpp>
#include <tf/serve/draft_source.hpp>
#include <tf/serve/lane_host.hpp>
#include <tf/serve/open_served.hpp>
