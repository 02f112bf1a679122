#pragma once
/// The built-in families: one line each. A new family adds its folder and one line here.
#include <families/gemma/gemma3.hpp>
#include <families/gemma/gemma4.hpp>
#include <families/glm/glm4.hpp>
#include <families/glm/glm4_moe.hpp>
#include <families/nemotron/nemotron_h.hpp>
#include <families/qwen/qwen3.hpp>
#include <families/qwen/qwen35.hpp>
#include <families/qwen/qwen35_moe.hpp>
#include <families/qwen/qwen3_moe.hpp>
#include <families/qwen/qwen3_next.hpp>
#include <tf/registry.hpp>

namespace tf::families {

using builtin = registry<gemma::gemma3,     //
                         gemma::gemma4,     //
                         qwen::qwen3,       //
                         qwen::qwen3_moe,   //
                         qwen::qwen35,      //
                         qwen::qwen35_moe,  //
                         qwen::qwen3_next,  //
                         glm::glm4,         //
                         glm::glm4_moe,     //
                         nemotron::nemotron_h>;

/// Calls `f(hana::type_c<Family>)` for the built-in family answering `arch`.
template <class Fn>
auto dispatch(std::string_view arch, Fn&& f) {
  return builtin::dispatch(arch, std::forward<Fn>(f));
}

}  // namespace tf::families
