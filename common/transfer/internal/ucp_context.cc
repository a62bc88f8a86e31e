#include "common/transfer/internal/ucp_context.h"

#include "common/core/status.h"
#include "common/transfer/internal/ucp_status.h"

namespace sparseserve::transfer::internal {

absl::StatusOr<std::unique_ptr<UcpContext>> UcpContext::Create(const std::string& transports) {
  ucp_config_t* config = nullptr;
  SS_RETURN_IF_ERROR(UcsToStatus(ucp_config_read(nullptr, nullptr, &config), "ucp_config_read"));
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

UcpContext::~UcpContext() {
  ucp_cleanup(context_);
}

}  // namespace sparseserve::transfer::internal
