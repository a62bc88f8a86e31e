# Third-party libraries, all from Debian 12 packages (scripts/setup.sh installs them).
find_package(Threads REQUIRED)
find_package(absl REQUIRED)
find_package(spdlog REQUIRED)
find_package(nlohmann_json REQUIRED)
find_package(PkgConfig REQUIRED)
pkg_check_modules(PCRE2 REQUIRED IMPORTED_TARGET libpcre2-8)
set(BLA_VENDOR OpenBLAS)
find_package(BLAS REQUIRED)
find_path(OPENBLAS_INCLUDE_DIR cblas.h PATH_SUFFIXES openblas-pthread openblas
          PATHS /usr/include/x86_64-linux-gnu /usr/include REQUIRED)
find_package(Protobuf REQUIRED)
find_package(gRPC CONFIG REQUIRED)
find_program(SPARSESERVE_PROTOC protoc REQUIRED)
find_program(SPARSESERVE_GRPC_CPP_PLUGIN grpc_cpp_plugin REQUIRED)
find_package(prometheus-cpp CONFIG REQUIRED)
# cpp-httplib (metrics endpoint, the OpenAI HTTP front door). Debian's libcpp-httplib.so is built
# with OpenSSL, and the define changes httplib::Request's layout: every user must compile with it.
find_package(OpenSSL REQUIRED)
add_library(sparseserve_httplib INTERFACE)
target_link_libraries(sparseserve_httplib INTERFACE cpp-httplib OpenSSL::SSL OpenSSL::Crypto)
target_compile_definitions(sparseserve_httplib INTERFACE CPPHTTPLIB_OPENSSL_SUPPORT)
# UCX: PyPI's libucx-cu13 (UCX 1.22, installed by scripts/deps.sh) when present, else Debian's
# libucx-dev (1.13). Debian's 1.13 aborts a worker whose peer dies while their endpoints are wiring
# up (ucp_request.c:684 asserts on a purged wireup REP; removed upstream in 1.14, openucx/ucx#8175),
# which no use of the API avoids (issue 20).
set(SPARSESERVE_UCX "auto" CACHE STRING
    "UCX to build against: auto (PyPI libucx if installed, else system), pypi, system")
add_library(sparseserve_ucx INTERFACE)
set(_ucx_found FALSE)
if(NOT SPARSESERVE_UCX STREQUAL "system")
  execute_process(
    COMMAND python3 -c "import libucx, os; print(os.path.dirname(libucx.__file__))"
    OUTPUT_VARIABLE SPARSESERVE_LIBUCX_DIR OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
  if(SPARSESERVE_LIBUCX_DIR AND EXISTS "${SPARSESERVE_LIBUCX_DIR}/lib/cmake/ucx")
    find_package(ucx CONFIG PATHS "${SPARSESERVE_LIBUCX_DIR}/lib/cmake/ucx" NO_DEFAULT_PATH)
  endif()
  if(ucx_FOUND)
    # The wheel's libraries carry no RUNPATH of their own: a DT_RPATH on our binaries also finds
    # libucp's own dependencies (libuct, libucs, libucm) there instead of Debian's same sonames.
    target_link_libraries(sparseserve_ucx INTERFACE ucx::ucp ucx::uct ucx::ucs)
    target_link_options(sparseserve_ucx INTERFACE "LINKER:--disable-new-dtags"
                        "LINKER:-rpath,${SPARSESERVE_LIBUCX_DIR}/lib")
    set(_ucx_found TRUE)
    message(STATUS "sparseserve: UCX ${ucx_VERSION} from PyPI libucx (${SPARSESERVE_LIBUCX_DIR})")
  elseif(SPARSESERVE_UCX STREQUAL "pypi")
    message(FATAL_ERROR "SPARSESERVE_UCX=pypi but PyPI libucx-cu13 is not installed (scripts/deps.sh)")
  endif()
endif()
if(NOT _ucx_found)
  pkg_check_modules(UCX REQUIRED IMPORTED_TARGET ucx)
  target_link_libraries(sparseserve_ucx INTERFACE PkgConfig::UCX)
  message(WARNING "sparseserve: building against system UCX ${UCX_VERSION}; UCX < 1.14 aborts a "
                  "worker whose KV transfer peer dies during connection setup (issue 20)")
endif()
if(SPARSESERVE_BUILD_TESTS)
  find_package(GTest REQUIRED)
endif()
if(SPARSESERVE_BUILD_BENCH)
  find_package(benchmark REQUIRED)
endif()
