# The torch ATen provider (csrc/providers/torch/): a static library linked only into the _C
# module, so the engine and its GoogleTest binary stay free of libtorch. It builds against the
# torch installed for ${Python_EXECUTABLE} (never a second copy): its headers, libtorch_cpu.so and
# libc10.so, with torch's C++ ABI setting. At run time _C finds libtorch through the rpath
# $ORIGIN/../torch/lib (site-packages/torch/lib), and torch_ort_backend imports torch first.

execute_process(
  COMMAND "${Python_EXECUTABLE}" -c
          "import os, torch; print(os.path.dirname(torch.__file__)); print(int(torch._C._GLIBCXX_USE_CXX11_ABI)); print(torch.__version__)"
  OUTPUT_VARIABLE tob_torch_info OUTPUT_STRIP_TRAILING_WHITESPACE RESULT_VARIABLE tob_torch_rc)
if(NOT tob_torch_rc EQUAL 0)
  message(FATAL_ERROR "TOB_WITH_TORCH is ON but torch cannot be imported by ${Python_EXECUTABLE}; "
                      "install torch or configure with -DTOB_WITH_TORCH=OFF")
endif()
string(REPLACE "\n" ";" tob_torch_info "${tob_torch_info}")
list(GET tob_torch_info 0 TOB_TORCH_DIR)
list(GET tob_torch_info 1 TOB_TORCH_CXX11_ABI)
list(GET tob_torch_info 2 TOB_TORCH_VERSION)
find_library(TOB_TORCH_CPU_LIB NAMES torch_cpu PATHS "${TOB_TORCH_DIR}/lib" NO_DEFAULT_PATH REQUIRED)
find_library(TOB_C10_LIB NAMES c10 PATHS "${TOB_TORCH_DIR}/lib" NO_DEFAULT_PATH REQUIRED)
message(STATUS "torch ${TOB_TORCH_VERSION}: ${TOB_TORCH_DIR} (_GLIBCXX_USE_CXX11_ABI=${TOB_TORCH_CXX11_ABI})")

# std::string and friends cross between the provider and the engine: both use torch's ABI. The
# new ABI is libstdc++'s default (and torch's since 2.7), so only the old one must be asked for,
# of the engine too (and then of everything linking it).
if(NOT TOB_TORCH_CXX11_ABI)
  target_compile_definitions(tob_engine PUBLIC _GLIBCXX_USE_CXX11_ABI=0)
endif()

file(GLOB TOB_TORCH_SOURCES CONFIGURE_DEPENDS csrc/providers/torch/*.cc)
add_library(tob_torch_provider STATIC ${TOB_TORCH_SOURCES})
# Only ATen/c10 core headers are used (include/torch/csrc/api is not needed).
target_include_directories(tob_torch_provider SYSTEM PRIVATE "${TOB_TORCH_DIR}/include")
target_link_libraries(tob_torch_provider PUBLIC tob_engine "${TOB_TORCH_CPU_LIB}" "${TOB_C10_LIB}")
target_compile_definitions(tob_torch_provider PUBLIC TOB_WITH_TORCH)
target_compile_options(tob_torch_provider PRIVATE -Wall -Wextra -Wno-unused-parameter)

# torch_parallel.cc hands the engine's intra-op work to at::parallel_for, whose OpenMP body is a
# header template: it must be compiled with OpenMP, or it silently runs on one thread. It must
# also use torch's OpenMP runtime, not a second one with its own threads: pip's torch ships
# libgomp.so.1 in torch/lib and loads it first, so linking that file makes ours the same runtime.
file(STRINGS "${TOB_TORCH_DIR}/include/ATen/Config.h" tob_at_openmp REGEX "define AT_PARALLEL_OPENMP 1")
if(tob_at_openmp)
  find_file(TOB_TORCH_GOMP NAMES libgomp.so.1 PATHS "${TOB_TORCH_DIR}/lib" NO_DEFAULT_PATH)
  set_source_files_properties("${CMAKE_CURRENT_SOURCE_DIR}/csrc/providers/torch/torch_parallel.cc"
                              PROPERTIES COMPILE_OPTIONS "-fopenmp")
  if(TOB_TORCH_GOMP)
    target_link_libraries(tob_torch_provider PUBLIC "${TOB_TORCH_GOMP}")
  else()
    find_package(OpenMP REQUIRED COMPONENTS CXX)
    target_link_libraries(tob_torch_provider PUBLIC OpenMP::OpenMP_CXX)
  endif()
  message(STATUS "torch intra-op pool: OpenMP (${TOB_TORCH_GOMP})")
endif()
