# tf_prebuilt: each built-in family's open_family on the CPU backend, compiled once for tf's own
# apps and tests instead of in every binary that calls tf::open (include/tf/engine/prebuilt_open.hpp).
# Linking it defines TF_PREBUILT_OPEN, which turns those instantiations into extern declarations.

# Links tf_prebuilt into `target` when its source `src` opens models by file (calls tf::open).
function(tf_link_prebuilt_if_opens target src)
  if(NOT TARGET tf_prebuilt)
    return()
  endif()
  file(READ ${src} text)
  if(text MATCHES "tf::open[<(]")
    target_link_libraries(${target} PRIVATE tf_prebuilt)
  endif()
endfunction()

if(NOT (TF_PREBUILT AND (TF_BUILD_APPS OR TF_BUILD_TESTS)))
  return()
endif()
file(STRINGS ${PROJECT_SOURCE_DIR}/include/tf/engine/prebuilt_open.hpp tf_family_count_line
     REGEX "^#define TF_BUILTIN_FAMILY_COUNT [0-9]+$")
string(REGEX REPLACE "^.* ([0-9]+)$" "\\1" tf_family_count "${tf_family_count_line}")
if(NOT tf_family_count MATCHES "^[0-9]+$")
  message(FATAL_ERROR "include/tf/engine/prebuilt_open.hpp has no '#define TF_BUILTIN_FAMILY_COUNT N'")
endif()
# Two TUs (one per core of a small machine): the families share most of their kernels' and
# layers' instantiations, so one TU per family would compile those ten times over.
math(EXPR tf_last_family "${tf_family_count} - 1")
set(tf_prebuilt_sources)
foreach(part RANGE 1)
  set(content "#include <tf/engine/open.hpp>\n\n")
  foreach(i RANGE ${tf_last_family})
    math(EXPR tf_family_part "${i} % 2")
    if(tf_family_part EQUAL part)
      string(APPEND content "template TF_PREBUILT_OPEN_FAMILY(${i});\n")
    endif()
  endforeach()
  set(src ${PROJECT_BINARY_DIR}/prebuilt/open_families_${part}.cpp)
  file(CONFIGURE OUTPUT ${src} CONTENT "${content}")
  list(APPEND tf_prebuilt_sources ${src})
endforeach()
add_library(tf_prebuilt STATIC ${tf_prebuilt_sources})
target_link_libraries(tf_prebuilt PUBLIC tf::tf PRIVATE tf_project_options)
target_compile_definitions(tf_prebuilt PUBLIC TF_PREBUILT_OPEN)
