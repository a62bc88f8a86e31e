#include "router/decode_stream.h"

#include <utility>

#include "common/rpc/deadline.h"

namespace sparseserve::router {

DecodeStream::DecodeStream(Listener* listener, int worker_idx, v1::DecodeRequest request,
                           absl::Duration timeout)
    : listener_(listener), worker_idx_(worker_idx), request_(std::move(request)) {
  rpc::SetDeadline(context_, timeout);
}

void DecodeStream::Start(v1::DecodeWorker::Stub& stub) {
  stub.async()->Decode(&context_, &request_, this);
  StartRead(&response_);
  StartCall();
}

void DecodeStream::OnReadDone(bool ok) {
  if (!ok) return;  // the stream ended; OnDone reports how
  listener_->OnDecodeResponse(this, response_);
  response_.Clear();
  StartRead(&response_);
}

void DecodeStream::OnDone(const grpc::Status& status) {
  // Last statement: the listener may destroy this object.
  listener_->OnDecodeDone(this, status);
}

}  // namespace sparseserve::router
