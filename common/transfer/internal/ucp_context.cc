#include "common/transfer/internal/ucp_context.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "absl/strings/match.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "common/core/status.h"
#include "common/transfer/internal/ucp_status.h"

namespace sparseserve::transfer::internal {

absl::StatusOr<std::unique_ptr<UcpContext>> UcpContext::Create(const std::string& transports) {
  ucp_config_t* config = nullptr;
  SS_RETURN_IF_ERROR(UcsToStatus(ucp_config_read(nullptr, nullptr, &config), "ucp_config_read"));
  // UCX's memory-type cache learns of GPU allocations through UCM's hooks on the CUDA allocation
  // calls, which never see this project's (the CUDA runtime is linked statically); with the cache
  // on, UCX takes a cudaMalloc'ed KV cache for host memory and ucp_mem_map fails. Off, UCX asks the
  // CUDA driver about each address it registers. An operator's UCX_MEMTYPE_CACHE still wins.
  if (std::getenv("UCX_MEMTYPE_CACHE") == nullptr) {
    ucs_status_t status = ucp_config_modify(config, "MEMTYPE_CACHE", "n");
    if (status != UCS_OK) {
      ucp_config_release(config);
      return UcsToStatus(status, "UCX MEMTYPE_CACHE=n");
    }
  }
  if (!transports.empty()) {
    ucs_status_t status = ucp_config_modify(config, "TLS", transports.c_str());
    if (status != UCS_OK) {
      ucp_config_release(config);
      return UcsToStatus(status, absl::StrCat("UCX transports '", transports, "'"));
    }
  }
  ucp_params_t params{};
  params.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_MT_WORKERS_SHARED;
  params.features = UCP_FEATURE_RMA | UCP_FEATURE_WAKEUP;
  params.mt_workers_shared = 1;
  ucp_context_h context = nullptr;
  ucs_status_t status = ucp_init(&params, config, &context);
  ucp_config_release(config);
  SS_RETURN_IF_ERROR(UcsToStatus(status, "ucp_init"));
  return std::unique_ptr<UcpContext>(new UcpContext(context));
}

std::vector<std::string> UcpContext::Resources() const {
  // UCX has no query for its resource list; ucp_context_print_info writes one
  // "#      resource N  :  md M  dev D  flags -- tl/device" line per resource.
  char* text = nullptr;
  size_t size = 0;
  FILE* out = open_memstream(&text, &size);
  if (out == nullptr) return {};
  ucp_context_print_info(context_, out);
  std::fclose(out);
  std::vector<std::string> resources;
  for (absl::string_view line : absl::StrSplit(absl::string_view(text, size), '\n')) {
    if (!absl::StrContains(line, " resource ")) continue;
    const size_t dash = line.rfind("-- ");
    if (dash == absl::string_view::npos) continue;
    resources.emplace_back(absl::StripAsciiWhitespace(line.substr(dash + 3)));
  }
  std::free(text);  // allocated by open_memstream
  return resources;
}

KvTransportInfo DescribeTransports(const UcpContext& context) {
  KvTransportInfo info;
  info.ucx_version = ucp_get_version_string();
  std::vector<std::string> names;
  for (const std::string& resource : context.Resources()) {
    std::string name(resource.substr(0, resource.find('/')));
    if (std::find(names.begin(), names.end(), name) == names.end()) names.push_back(name);
    if (!info.resources.empty()) info.resources += ',';
    info.resources += resource;
  }
  info.transports = absl::StrJoin(names, ",");
  return info;
}

UcpContext::~UcpContext() {
  ucp_cleanup(context_);
}

}  // namespace sparseserve::transfer::internal
