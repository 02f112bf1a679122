# CUDA, cuBLASLt and NCCL are found when present and never required for the CPU build; the CUDA
# backend's target comes with its sources.
set(TF_HAS_CUDA OFF)
set(TF_HAS_NCCL OFF)
if(NOT TF_CUDA STREQUAL "OFF")
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    find_package(CUDAToolkit QUIET)
  endif()
  if(CMAKE_CUDA_COMPILER AND CUDAToolkit_FOUND AND TARGET CUDA::cublasLt)
    # Hopper (H100/H200) and Ampere/Ada as SASS, with PTX the driver compiles for newer cards.
    if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
      set(CMAKE_CUDA_ARCHITECTURES 80-real 90)
    endif()
    enable_language(CUDA)
    set(TF_HAS_CUDA ON)
  elseif(TF_CUDA STREQUAL "ON")
    message(FATAL_ERROR "TF_CUDA=ON but nvcc, the CUDA toolkit or cuBLASLt was not found")
  endif()
endif()
if(TF_HAS_CUDA AND NOT TF_NCCL STREQUAL "OFF")
  find_library(TF_NCCL_LIBRARY nccl HINTS ${CUDAToolkit_LIBRARY_DIR} /usr/lib/x86_64-linux-gnu)
  find_path(TF_NCCL_INCLUDE nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS} /usr/include)
  if(TF_NCCL_LIBRARY AND TF_NCCL_INCLUDE)
    set(TF_HAS_NCCL ON)
  elseif(TF_NCCL STREQUAL "ON")
    message(FATAL_ERROR "TF_NCCL=ON but libnccl was not found")
  endif()
endif()
message(STATUS "tf: CUDA backend ${TF_HAS_CUDA} (TF_CUDA=${TF_CUDA}), NCCL ${TF_HAS_NCCL}")

# tf::cuda: the CUDA backend (include/tf/backend/cuda.hpp) with the kernels compiled once by nvcc
# (kernels/cuda/launch.cu). The engine's templates stay with the C++ compiler.
if(TF_HAS_CUDA)
  add_library(tf_cuda_kernels STATIC ${PROJECT_SOURCE_DIR}/kernels/cuda/launch.cu)
  set_target_properties(tf_cuda_kernels PROPERTIES POSITION_INDEPENDENT_CODE ON)
  target_include_directories(tf_cuda_kernels PRIVATE ${PROJECT_SOURCE_DIR}/include
                                                     ${PROJECT_SOURCE_DIR})
  # CMake before 3.30 does not know nvcc's C++20 flag, so it is given here.
  target_compile_options(tf_cuda_kernels PRIVATE
                         $<$<COMPILE_LANGUAGE:CUDA>:-std=c++20 -Xcompiler=-Wall,-Wextra,-Werror
                         -Werror=all-warnings>)
  target_link_libraries(tf_cuda_kernels PUBLIC CUDA::cudart)
  add_library(tf_cuda INTERFACE)
  add_library(tf::cuda ALIAS tf_cuda)
  target_link_libraries(tf_cuda INTERFACE tf::tf tf_cuda_kernels CUDA::cudart CUDA::cublasLt)
  target_compile_definitions(tf_cuda INTERFACE TF_WITH_CUDA=1)
endif()
