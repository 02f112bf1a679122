#pragma once
/// The one header a downstream project includes to run a model: tf::open and tf::loaded_model
/// (generate), the engine over a family and a backend, and the family registry. Serving many
/// requests over a model (the lane host) is `<tf/serve.hpp>`.
#include <families/registry.hpp>
#include <tf/backend/backend.hpp>
#include <tf/backend/cpu.hpp>
#include <tf/engine/engine.hpp>
#include <tf/engine/loaded_model.hpp>
#include <tf/engine/open.hpp>
#include <tf/engine/stream.hpp>
#include <tf/error.hpp>
#include <tf/family.hpp>
#include <tf/layers/attention.hpp>
#include <tf/layers/mlp.hpp>
#include <tf/layers/moe.hpp>
#include <tf/registry.hpp>
