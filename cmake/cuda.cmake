# The CUDA execution provider: kernels/<family>/*.cu (device code, nvcc) and csrc/providers/cuda/**/*.cc (host
# side, the host C++ compiler) in one static library, tob_cuda, linked into tob_engine with
# TOB_WITH_CUDA defined. Built when TOB_ENABLE_CUDA is ON and nvcc is found; skipped otherwise.
#
# Where the libraries come from:
#   cudart  the toolkit (CUDA::cudart_static: nothing to ship at runtime)
#   cuBLAS  the toolkit when it has it, else the nvidia-cublas wheel in the Python environment
#   NCCL    the toolkit / system when present, else the nvidia-nccl-cu* wheel; optional
# scripts/install_cuda_deps.sh installs the wheels.
#
# Sets TOB_WITH_CUDA (ON/OFF) and, when ON, the function tob_cuda_add_runtime_paths(target) that
# gives a binary the run paths of the wheel libraries (build tree and installed package).

set(TOB_WITH_CUDA OFF)

# kernels/*.h hold the host/device per-element arithmetic, which the CPU-only tests exercise too:
# "kernels/..." resolves in every build, with or without CUDA.
target_include_directories(tob_engine PUBLIC "$<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}>")

if(NOT TOB_ENABLE_CUDA)
  message(STATUS "CUDA: disabled (-DTOB_ENABLE_CUDA=OFF); the CUDA provider and kernels/ are skipped")
  return()
endif()

include(CheckLanguage)
check_language(CUDA)
if(NOT CMAKE_CUDA_COMPILER)
  message(STATUS "CUDA: nvcc not found (set CUDACXX or put nvcc on PATH); "
                 "the CUDA provider and kernels/ are skipped")
  return()
endif()

# Ampere and Hopper as real code; Blackwell too when this nvcc knows it. The newest one also
# carries PTX so that later GPUs can JIT it.
if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
  execute_process(COMMAND "${CMAKE_CUDA_COMPILER}" --list-gpu-code
                  OUTPUT_VARIABLE tob_nvcc_codes ERROR_QUIET RESULT_VARIABLE tob_nvcc_rc)
  if(tob_nvcc_rc EQUAL 0 AND tob_nvcc_codes MATCHES "sm_100")
    set(CMAKE_CUDA_ARCHITECTURES "80-real;90-real;100")
  else()
    set(CMAKE_CUDA_ARCHITECTURES "80-real;90")
  endif()
endif()
if(NOT DEFINED CMAKE_CUDA_HOST_COMPILER)
  set(CMAKE_CUDA_HOST_COMPILER "${CMAKE_CXX_COMPILER}")
endif()
enable_language(CUDA)
# C++20 like the host code. CMake before 3.26 knows no C++20 flag for nvcc (which has one since
# CUDA 12.0), so it is supplied here.
if(NOT DEFINED CMAKE_CUDA20_STANDARD_COMPILE_OPTION OR CMAKE_CUDA20_STANDARD_COMPILE_OPTION STREQUAL "")
  set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION "-std=c++20")
  set(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION "-std=c++20")
endif()
set(CMAKE_CUDA_STANDARD 20)
set(CMAKE_CUDA_STANDARD_REQUIRED ON)
find_package(CUDAToolkit REQUIRED)
message(STATUS "CUDA: nvcc ${CMAKE_CUDA_COMPILER_VERSION} (${CMAKE_CUDA_COMPILER}), "
               "architectures ${CMAKE_CUDA_ARCHITECTURES}")

# Asks the Python environment where an installed wheel (the first of ARGN installed) keeps
# `header` and a library named `library_prefix`.so*; sets both outputs to "" when none has them.
function(tob_find_in_wheels out_include out_library header library_prefix)
  set(${out_include} "" PARENT_SCOPE)
  set(${out_library} "" PARENT_SCOPE)
  set(dists ${ARGN})
  string(REPLACE ";" "\",\"" dists_py "${dists}")
  execute_process(
    COMMAND "${Python_EXECUTABLE}" -c "
import importlib.metadata as md
for dist in [\"${dists_py}\"]:
    try:
        files = md.files(dist) or []
    except md.PackageNotFoundError:
        continue
    inc = next((f.locate().parent for f in files if f.name == '${header}'), None)
    lib = next((f.locate() for f in files
                if f.name.startswith('${library_prefix}.so') and f.parent.name == 'lib'), None)
    if inc and lib:
        print(f'{inc.resolve()};{lib.resolve()}')
        break
"
    OUTPUT_VARIABLE found OUTPUT_STRIP_TRAILING_WHITESPACE RESULT_VARIABLE rc ERROR_QUIET)
  if(rc EQUAL 0 AND found)
    list(GET found 0 include_dir)
    list(GET found 1 library)
    set(${out_include} "${include_dir}" PARENT_SCOPE)
    set(${out_library} "${library}" PARENT_SCOPE)
  endif()
endfunction()

function(tob_import_shared target include_dir library)
  add_library(${target} SHARED IMPORTED GLOBAL)
  set_target_properties(${target} PROPERTIES
    IMPORTED_LOCATION "${library}"
    INTERFACE_INCLUDE_DIRECTORIES "${include_dir}")
endfunction()

set(tob_cuda_wheel_libdirs "")

# ---- cuBLAS (required) ----
if(TARGET CUDA::cublas)
  set(tob_cublas_target CUDA::cublas)
  message(STATUS "CUDA: cuBLAS from the toolkit (${CUDAToolkit_LIBRARY_DIR})")
else()
  tob_find_in_wheels(tob_cublas_include tob_cublas_library cublas_v2.h libcublas
                     nvidia-cublas nvidia-cublas-cu${CUDAToolkit_VERSION_MAJOR})
  if(NOT tob_cublas_library)
    message(FATAL_ERROR
      "CUDA: nvcc was found but cuBLAS was not: the toolkit has no cuBLAS and no nvidia-cublas "
      "wheel is installed in ${Python_EXECUTABLE}'s environment. Run scripts/install_cuda_deps.sh "
      "(with the project's virtual environment active) and configure again, or configure with "
      "-DTOB_ENABLE_CUDA=OFF.")
  endif()
  tob_import_shared(tob::cublas "${tob_cublas_include}" "${tob_cublas_library}")
  set(tob_cublas_target tob::cublas)
  get_filename_component(tob_cublas_libdir "${tob_cublas_library}" DIRECTORY)
  list(APPEND tob_cuda_wheel_libdirs "${tob_cublas_libdir}")
  message(STATUS "CUDA: cuBLAS from the nvidia-cublas wheel (${tob_cublas_library})")
endif()

# ---- NCCL (optional: only collectives need it, and nothing links it until they exist) ----
find_path(TOB_NCCL_INCLUDE_DIR nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS})
find_library(TOB_NCCL_LIBRARY nccl HINTS ${CUDAToolkit_LIBRARY_DIR})
if(TOB_NCCL_INCLUDE_DIR AND TOB_NCCL_LIBRARY)
  tob_import_shared(tob::nccl "${TOB_NCCL_INCLUDE_DIR}" "${TOB_NCCL_LIBRARY}")
  message(STATUS "CUDA: NCCL from the system (${TOB_NCCL_LIBRARY})")
else()
  tob_find_in_wheels(tob_nccl_include tob_nccl_library nccl.h libnccl
                     nvidia-nccl-cu${CUDAToolkit_VERSION_MAJOR})
  if(tob_nccl_library)
    tob_import_shared(tob::nccl "${tob_nccl_include}" "${tob_nccl_library}")
    message(STATUS "CUDA: NCCL from the nvidia-nccl wheel (${tob_nccl_library})")
  else()
    message(STATUS "CUDA: NCCL not found (multi-GPU collectives unavailable; "
                   "TOB_WITH_NCCL=1 scripts/install_cuda_deps.sh installs it)")
  endif()
endif()

# ---- tob_cuda ----
file(GLOB_RECURSE TOB_CUDA_KERNEL_SOURCES CONFIGURE_DEPENDS "${PROJECT_SOURCE_DIR}/kernels/*.cu")
file(GLOB_RECURSE TOB_CUDA_HOST_SOURCES CONFIGURE_DEPENDS "${PROJECT_SOURCE_DIR}/csrc/providers/cuda/*.cc")
add_library(tob_cuda STATIC ${TOB_CUDA_KERNEL_SOURCES} ${TOB_CUDA_HOST_SOURCES})
target_compile_definitions(tob_cuda PUBLIC TOB_WITH_CUDA)
# No --use_fast_math: the kernels must round like the CPU ones (core/half.h's subnormal path needs
# denormals kept; expf/erff/tanhf must be the accurate versions).
target_compile_options(tob_cuda PRIVATE
  $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wno-unused-parameter -march=x86-64-v3 -mtune=native>
  $<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-Wall,-Wno-unused-parameter>)
set_target_properties(tob_cuda PROPERTIES CUDA_SEPARABLE_COMPILATION OFF)
# The CUDA runtime API is public (the binding calls kernels/ launchers with a cudaStream_t);
# cuBLAS stays private to the provider, its consumers only link it. Host code calls the engine
# and the engine calls RegisterCudaKernels: a cycle CMake resolves for static libraries by
# repeating them on the link line.
target_link_libraries(tob_cuda PUBLIC CUDA::cudart_static PRIVATE ${tob_cublas_target} tob_engine)
target_link_libraries(tob_engine PUBLIC tob_cuda)
set(TOB_WITH_CUDA ON)

# Run paths for a binary that links the engine: the wheel directories in the build tree, and, for
# the installed extension (site-packages/torch_ort_backend/_C*.so), the wheels next to it.
list(REMOVE_DUPLICATES tob_cuda_wheel_libdirs)
set(TOB_CUDA_BUILD_RPATH ${tob_cuda_wheel_libdirs})
set(TOB_CUDA_INSTALL_RPATH "")
foreach(dir IN LISTS tob_cuda_wheel_libdirs)
  # .../site-packages/nvidia/cu13/lib -> $ORIGIN/../nvidia/cu13/lib
  if(dir MATCHES "/site-packages/(.*)$")
    list(APPEND TOB_CUDA_INSTALL_RPATH "$ORIGIN/../${CMAKE_MATCH_1}")
  endif()
endforeach()

function(tob_cuda_add_runtime_paths target)
  set_property(TARGET ${target} APPEND PROPERTY BUILD_RPATH ${TOB_CUDA_BUILD_RPATH})
  set_property(TARGET ${target} APPEND PROPERTY INSTALL_RPATH ${TOB_CUDA_INSTALL_RPATH})
endfunction()
