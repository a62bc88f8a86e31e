# CUDA toolchain set-up: Hopper only (sm_90a), used only under kernels/cuda/.
if(SPARSESERVE_WITH_CUDA)
  set(CMAKE_CUDA_ARCHITECTURES 90a)
  # CMake 3.25 does not know nvcc 13's C++20 flag, so the dialect is passed by hand instead of
  # through CMAKE_CUDA_STANDARD (which would break enable_language's try_compile).
  set(CMAKE_CUDA_FLAGS "${CMAKE_CUDA_FLAGS} -std=c++20")
  enable_language(CUDA)
  find_package(CUDAToolkit REQUIRED)
  # ... and targets that inherit C++20 (CXX_STANDARD also sets the CUDA dialect) need CMake to know
  # how nvcc spells it.
  set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION "")
  set(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION "")
  # NCCL (tensor parallelism, issue 19) ships with the CUDA 13 toolkit (nccl.h in its include
  # directory, libnccl.so in its lib directory).
  find_library(SPARSESERVE_NCCL_LIBRARY nccl HINTS ${CUDAToolkit_LIBRARY_DIR}
               ${CUDAToolkit_LIBRARY_ROOT}/lib REQUIRED)
  find_path(SPARSESERVE_NCCL_INCLUDE_DIR nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS} REQUIRED)
  # cuDNN's fused SDPA for dense prefill (kernels/cuda/cudnn_prefill.cc, issue 16): cudnn.h from
  # the toolkit, cudnn-frontend's headers from PyPI's nvidia-cudnn-frontend (scripts/deps.sh puts
  # them in site-packages/include). libcudnn is opened at run time, never linked. Without the
  # headers the file builds as a stub that says so, and the project's kernel runs.
  execute_process(
    COMMAND python3 -c "import sysconfig; print(sysconfig.get_paths()['purelib'])"
    OUTPUT_VARIABLE _sparseserve_site OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
  find_path(SPARSESERVE_CUDNN_FRONTEND_INCLUDE_DIR cudnn_frontend.h
            HINTS "${_sparseserve_site}/include" NO_DEFAULT_PATH)
  find_path(SPARSESERVE_CUDNN_INCLUDE_DIR cudnn.h HINTS ${CUDAToolkit_INCLUDE_DIRS})
  if(SPARSESERVE_CUDNN_FRONTEND_INCLUDE_DIR AND SPARSESERVE_CUDNN_INCLUDE_DIR)
    set(SPARSESERVE_WITH_CUDNN_FRONTEND ON)
    message(STATUS "sparseserve: cuDNN prefill path ON (${SPARSESERVE_CUDNN_FRONTEND_INCLUDE_DIR})")
  else()
    set(SPARSESERVE_WITH_CUDNN_FRONTEND OFF)
    message(STATUS "sparseserve: cuDNN prefill path OFF (no cudnn-frontend or cudnn.h headers)")
  endif()
  message(STATUS "sparseserve: CUDA backend ON (nvcc ${CMAKE_CUDA_COMPILER_VERSION}, sm_90a)")
else()
  message(STATUS "sparseserve: CUDA backend OFF (CPU reference backend only)")
endif()
