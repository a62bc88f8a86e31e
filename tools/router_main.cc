// `sparseserve-router`: the router alone (`sparseserve router` without the rest), for a router
// image with no model, kernel or CUDA library: it links only the router's libraries.
#include "tools/command.h"

int main(int argc, char** argv) {
  sparseserve::tools::InstallCrashHandler(argv[0]);
  return sparseserve::tools::RunCommand(sparseserve::tools::RouterCommand(), "sparseserve-router",
                                        argc, argv);
}
