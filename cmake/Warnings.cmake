# Compiler flags for project targets: strict warnings (errors by default), sanitizers on request.
set(SPARSESERVE_CXX_WARNINGS -Wall -Wextra -Wpedantic -Wshadow -Wnon-virtual-dtor
    -Wimplicit-fallthrough -Wno-missing-field-initializers)
if(SPARSESERVE_WERROR)
  list(APPEND SPARSESERVE_CXX_WARNINGS -Werror)
endif()
if(CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
  list(APPEND SPARSESERVE_CXX_WARNINGS -Wthread-safety)
endif()
# Test code: GCC 12 at -O2/-O3 reports -Wrestrict and -Wstringop-overflow inside libstdc++'s own
# std::string code (operator+ on a temporary, GCC bugs 105329 and 105651, fixed in GCC 13): false
# positives that failed a Release build of the tests under -Werror. Only those two, only on that
# compiler, only on test targets (project code builds clean; clang-tidy, which reads the project
# code's compile commands, would reject the GCC-only options).
set(SPARSESERVE_TEST_CXX_WARNINGS ${SPARSESERVE_CXX_WARNINGS})
if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU" AND CMAKE_CXX_COMPILER_VERSION VERSION_GREATER_EQUAL 12
   AND CMAKE_CXX_COMPILER_VERSION VERSION_LESS 13)
  list(APPEND SPARSESERVE_TEST_CXX_WARNINGS -Wno-restrict -Wno-stringop-overflow)
endif()

if(SPARSESERVE_FUZZ)
  if(NOT CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
    message(FATAL_ERROR "SPARSESERVE_FUZZ needs clang (-DCMAKE_CXX_COMPILER=clang++)")
  endif()
  # Coverage feedback for the fuzzers comes from instrumenting all project code; the ASan/UBSan
  # runtimes (forced on below) provide the callbacks for binaries that are not fuzzers.
  set(SPARSESERVE_SANITIZE ON)
  add_compile_options(-fsanitize=fuzzer-no-link)
endif()
if(SPARSESERVE_SANITIZE)
  add_compile_options(-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=all)
  add_link_options(-fsanitize=address,undefined)
endif()

# sparseserve_library(NAME SRCS... DEPS ...) — one CMake library per module directory.
function(sparseserve_library name)
  cmake_parse_arguments(ARG "" "" "SRCS;DEPS" ${ARGN})
  add_library(${name} STATIC ${ARG_SRCS})
  target_include_directories(${name} PUBLIC ${PROJECT_SOURCE_DIR})
  target_link_libraries(${name} PUBLIC ${ARG_DEPS})
  target_compile_options(${name} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:${SPARSESERVE_CXX_WARNINGS}>)
endfunction()

# sparseserve_test(NAME SRCS... DEPS ... [LABELS ...]) — one gtest binary registered with ctest.
# Tests are labelled "unit" (the sanitizer build runs those again) unless LABELS says "slow":
# minutes of model runs that the normal build runs once, which ctest -j starts first (COST: on a
# clean clone ctest has no timings and would start them in declaration order, leaving a long one
# alone at the end). A sanitizer build, which runs only the "unit" tests, does not build the slow
# ones at all; the target `unit_tests` builds the others (scripts/test.sh builds no more there).
function(sparseserve_test name)
  cmake_parse_arguments(ARG "" "" "SRCS;DEPS;LABELS" ${ARGN})
  if(SPARSESERVE_SANITIZE AND "slow" IN_LIST ARG_LABELS)
    return()
  endif()
  if(NOT "slow" IN_LIST ARG_LABELS)
    set_property(GLOBAL APPEND PROPERTY SPARSESERVE_UNIT_TESTS ${name})
  endif()
  add_executable(${name} ${ARG_SRCS})
  target_link_libraries(${name} PRIVATE ${ARG_DEPS} GTest::gtest GTest::gmock GTest::gtest_main)
  target_compile_options(${name} PRIVATE ${SPARSESERVE_TEST_CXX_WARNINGS})
  target_compile_definitions(${name} PRIVATE
      SPARSESERVE_TEST_DATA_DIR="${PROJECT_SOURCE_DIR}/tests/data"
      SPARSESERVE_SOURCE_DIR="${PROJECT_SOURCE_DIR}")
  if("slow" IN_LIST ARG_LABELS)
    set(labels "${ARG_LABELS}")
    set(cost 100)
  else()
    set(labels "unit;${ARG_LABELS}")
    set(cost 0)
  endif()
  gtest_discover_tests(${name} DISCOVERY_MODE PRE_TEST PROPERTIES LABELS "${labels}" COST ${cost})
endfunction()
include(GoogleTest)
