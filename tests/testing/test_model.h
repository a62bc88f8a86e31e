// Locates the stories260K test model for tests: $SPARSESERVE_MODEL_MIRROR, the repository's
// models/ (filled by scripts/fetch_model.sh), or ../shared/models beside the repository.
#ifndef SPARSESERVE_TESTS_TESTING_TEST_MODEL_H_
#define SPARSESERVE_TESTS_TESTING_TEST_MODEL_H_

#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

namespace sparseserve::testing {

// Path of `stories260K/<file>`, or "" when no copy is found.
inline std::string FindTestModelFile(const std::string& file) {
  std::vector<std::string> roots;
  if (const char* mirror = std::getenv("SPARSESERVE_MODEL_MIRROR")) roots.push_back(mirror);
  roots.push_back(std::string(SPARSESERVE_SOURCE_DIR) + "/models");
  roots.push_back(std::string(SPARSESERVE_SOURCE_DIR) + "/../shared/models");
  for (const std::string& root : roots) {
    const std::string path = root + "/stories260K/" + file;
    if (std::filesystem::exists(path)) return path;
  }
  return "";
}

}  // namespace sparseserve::testing

#endif  // SPARSESERVE_TESTS_TESTING_TEST_MODEL_H_
