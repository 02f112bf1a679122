#pragma once
/// The shared CPU ops under the Gemma forward's detail namespace.
#include <families/common/cpu_ops.hpp>

namespace tf::families::gemma::detail {

using namespace tf::families::cpu_ops;

}  // namespace tf::families::gemma::detail
