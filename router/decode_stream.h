// DecodeStream: one DecodeWorker.Decode server-streaming call made with gRPC's callback client
// API (a ClientReadReactor). Each received DecodeResponse and the final status are handed to a
// Listener; the stream reads ahead continuously (the listener coalesces tokens while the client
// write is slow, so nothing here blocks).
//
// Ownership: the listener (a GenerateCall) owns the DecodeStream and keeps it, and itself, alive
// until OnDecodeDone has returned. Thread-safety: reactions run on gRPC threads, one at a time
// for one stream; Cancel may be called from any thread at any time.
#ifndef SPARSESERVE_ROUTER_DECODE_STREAM_H_
#define SPARSESERVE_ROUTER_DECODE_STREAM_H_

#include "absl/time/time.h"
#include "grpcpp/client_context.h"
#include "grpcpp/support/client_callback.h"
#include "sparseserve/v1/worker.grpc.pb.h"

namespace sparseserve::router {

class DecodeStream final : public grpc::ClientReadReactor<v1::DecodeResponse> {
 public:
  class Listener {
   public:
    virtual ~Listener() = default;
    // One message of `stream`; must not block.
    virtual void OnDecodeResponse(DecodeStream* stream, const v1::DecodeResponse& response) = 0;
    // The stream's final status; the last call for `stream`; must not block.
    virtual void OnDecodeDone(DecodeStream* stream, const grpc::Status& status) = 0;
  };

  // `listener` is borrowed (see the header comment); `worker_idx` names the decode worker.
  DecodeStream(Listener* listener, int worker_idx, v1::DecodeRequest request,
               absl::Duration timeout);

  DecodeStream(const DecodeStream&) = delete;
  DecodeStream& operator=(const DecodeStream&) = delete;

  // Starts the call on `stub` (borrowed; outlives the call). Call once.
  void Start(v1::DecodeWorker::Stub& stub);

  // Cancels the call (its OnDecodeDone follows with CANCELLED unless it already finished).
  void Cancel() { context_.TryCancel(); }

  int worker_idx() const { return worker_idx_; }
  const v1::DecodeRequest& request() const { return request_; }

  void OnReadDone(bool ok) override;
  void OnDone(const grpc::Status& status) override;

 private:
  Listener* const listener_;
  const int worker_idx_;
  const v1::DecodeRequest request_;
  grpc::ClientContext context_;
  v1::DecodeResponse response_;
};

}  // namespace sparseserve::router

#endif  // SPARSESERVE_ROUTER_DECODE_STREAM_H_
