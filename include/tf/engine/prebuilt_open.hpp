#pragma once
/// For tf's own binaries only (CMake's tf_prebuilt library defines TF_PREBUILT_OPEN for what links
/// it): open_family of each built-in family on the CPU backend is compiled once, in that library,
/// instead of in every binary that calls tf::open. Downstream projects never see this: tf stays
/// header-only for them.
#include <tf/engine/open.hpp>

#include <boost/preprocessor/repetition/repeat.hpp>

#include <filesystem>
#include <memory>

// The number of built-in families; cmake/tf_prebuilt.cmake reads it to list their instantiations.
#define TF_BUILTIN_FAMILY_COUNT 10

static_assert(tf::families::builtin::size == TF_BUILTIN_FAMILY_COUNT,
              "tf: families/registry.hpp lists a different number of families than "
              "TF_BUILTIN_FAMILY_COUNT in include/tf/engine/prebuilt_open.hpp: set it to the "
              "registry's size (cmake/tf_prebuilt.cmake reads it)");

/// open_family of the I-th built-in family on the CPU: declared here, defined once in the library.
#define TF_PREBUILT_OPEN_FAMILY(I)                                        \
  std::unique_ptr<tf::loaded_model>                                       \
  tf::open_family<tf::families::builtin::family_at<I>, tf::backend::cpu>( \
      tf::model::model_file, std::filesystem::path const&, tf::open_options const&)

#define TF_PREBUILT_OPEN_EXTERN(z, i, unused) extern template TF_PREBUILT_OPEN_FAMILY(i);
BOOST_PP_REPEAT(TF_BUILTIN_FAMILY_COUNT, TF_PREBUILT_OPEN_EXTERN, ~)
#undef TF_PREBUILT_OPEN_EXTERN
