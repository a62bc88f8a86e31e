// Fake decode and prefill workers for the router service tests: real gRPC callback services on
// loopback whose "model" emits a fixed token script, with injectable failures (fail after k
// tokens with a given code, or hang until cancelled) and a record of every call they received.
// Thread-safe (gRPC calls them concurrently; the records are guarded by a mutex).
#ifndef SPARSESERVE_TESTS_UNIT_ROUTER_FAKE_WORKERS_H_
#define SPARSESERVE_TESTS_UNIT_ROUTER_FAKE_WORKERS_H_

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "sparseserve/v1/worker.grpc.pb.h"

namespace sparseserve::router::testing {

struct FakeDecodeConfig {
  std::vector<int32_t> script;  // tokens of the sequence, from the first generated one
  int fail_after = -1;          // tokens sent per Decode call before failing; -1: never
  grpc::StatusCode fail_code = grpc::StatusCode::UNAVAILABLE;
  bool hang_instead_of_failing = false;  // at fail_after, wait until the call is cancelled
  int block_tokens = 16;
  int num_free_blocks = 100;
  int num_total_blocks = 100;
  std::vector<uint64_t> cached_block_hashes;
};

class FakeDecodeWorker final : public v1::DecodeWorker::CallbackService {
 public:
  explicit FakeDecodeWorker(FakeDecodeConfig config) : config_(std::move(config)) {}

  std::vector<v1::DecodeRequest> decode_requests() {
    absl::MutexLock lock(&mu_);
    return decode_requests_;
  }
  std::vector<std::string> aborted_ids() {
    absl::MutexLock lock(&mu_);
    return aborted_ids_;
  }
  std::vector<std::string> released_ids() {
    absl::MutexLock lock(&mu_);
    return released_ids_;
  }
  int num_reserves() {
    absl::MutexLock lock(&mu_);
    return num_reserves_;
  }
  int num_cancelled_decodes() {
    absl::MutexLock lock(&mu_);
    return num_cancelled_decodes_;
  }

  grpc::ServerWriteReactor<v1::DecodeResponse>* Decode(grpc::CallbackServerContext*,
                                                       const v1::DecodeRequest* request) override {
    {
      absl::MutexLock lock(&mu_);
      decode_requests_.push_back(*request);
    }
    return new DecodeWriter(this, *request);
  }

  grpc::ServerUnaryReactor* ReserveKv(grpc::CallbackServerContext* context,
                                      const v1::ReserveKvRequest* request,
                                      v1::ReserveKvResponse* response) override {
    absl::MutexLock lock(&mu_);
    ++num_reserves_;
    response->mutable_reservation()->set_reservation_id("resv-" + request->request_id());
    response->mutable_reservation()->mutable_layout()->set_block_tokens(config_.block_tokens);
    response->set_cached_tokens(3);
    auto* reactor = context->DefaultReactor();
    reactor->Finish(grpc::Status::OK);
    return reactor;
  }

  grpc::ServerUnaryReactor* Release(grpc::CallbackServerContext* context,
                                    const v1::ReleaseRequest* request,
                                    v1::ReleaseResponse*) override {
    absl::MutexLock lock(&mu_);
    released_ids_.push_back(request->reservation_id());
    auto* reactor = context->DefaultReactor();
    reactor->Finish(grpc::Status::OK);
    return reactor;
  }

  grpc::ServerUnaryReactor* Abort(grpc::CallbackServerContext* context,
                                  const v1::WorkerAbortRequest* request,
                                  v1::WorkerAbortResponse* response) override {
    absl::MutexLock lock(&mu_);
    aborted_ids_.push_back(request->request_id());
    response->set_found(true);
    auto* reactor = context->DefaultReactor();
    reactor->Finish(grpc::Status::OK);
    return reactor;
  }

  grpc::ServerUnaryReactor* Status(grpc::CallbackServerContext* context,
                                   const v1::WorkerStatusRequest*,
                                   v1::WorkerStatusResponse* response) override {
    response->set_role("decode");
    response->set_num_free_blocks(config_.num_free_blocks);
    response->set_num_total_blocks(config_.num_total_blocks);
    response->mutable_cached_block_hashes()->Add(config_.cached_block_hashes.begin(),
                                                 config_.cached_block_hashes.end());
    response->mutable_layout()->set_block_tokens(config_.block_tokens);
    response->mutable_layout()->set_dtype("f32");
    response->set_model("tiny_llama");
    response->set_architecture("llama");
    response->set_vocab_size(511);
    response->set_max_context(512);
    response->set_num_layers(2);
    auto* reactor = context->DefaultReactor();
    reactor->Finish(grpc::Status::OK);
    return reactor;
  }

 private:
  // Streams script[start, start + max_tokens), one token per message, the last one with
  // FINISH_REASON_LENGTH; or fails / hangs after fail_after tokens.
  class DecodeWriter final : public grpc::ServerWriteReactor<v1::DecodeResponse> {
   public:
    DecodeWriter(FakeDecodeWorker* worker, const v1::DecodeRequest& request) : worker_(worker) {
      const std::vector<int32_t>& script = worker->config_.script;
      const size_t start =
          std::min(script.size(), static_cast<size_t>(request.num_generated_before() +
                                                      (request.reservation_id().empty() ? 0 : 1)));
      const size_t end = std::min(script.size(), start + request.max_tokens());
      tokens_.assign(script.begin() + start, script.begin() + end);
      Next(grpc::Status::OK);
    }
    void OnWriteDone(bool ok) override {
      Next(ok ? grpc::Status::OK : grpc::Status(grpc::StatusCode::CANCELLED, "write failed"));
    }
    void OnCancel() override {
      {
        absl::MutexLock lock(&worker_->mu_);
        ++worker_->num_cancelled_decodes_;
      }
      Next(grpc::Status::CANCELLED);
    }
    void OnDone() override { delete this; }

   private:
    // Decides under the lock, then writes or finishes without holding it. A non-OK `end`
    // finishes the call with it.
    void Next(const grpc::Status& end) {
      bool write = false;
      std::optional<grpc::Status> finish;
      {
        absl::MutexLock lock(&mu_);
        if (finished_) return;
        const FakeDecodeConfig& config = worker_->config_;
        if (!end.ok()) {
          finish = end;
        } else if (sent_ == config.fail_after) {
          if (config.hang_instead_of_failing) return;  // until OnCancel
          finish = grpc::Status(config.fail_code, "fake worker failure");
        } else if (sent_ == static_cast<int>(tokens_.size())) {
          finish = grpc::Status::OK;
        } else {
          response_.Clear();
          response_.add_token_ids(tokens_[sent_]);
          if (sent_ == 0) {
            response_.set_cached_prompt_tokens(7);
            response_.set_queue_seconds(0.25);
          }
          ++sent_;
          if (sent_ == static_cast<int>(tokens_.size())) {
            response_.set_finish_reason(v1::FINISH_REASON_LENGTH);
          }
          write = true;
        }
        if (finish.has_value()) finished_ = true;
      }
      if (write) StartWrite(&response_);
      if (finish.has_value()) Finish(*finish);
    }

    FakeDecodeWorker* const worker_;
    std::vector<int32_t> tokens_;
    absl::Mutex mu_;
    v1::DecodeResponse response_;
    int sent_ ABSL_GUARDED_BY(mu_) = 0;
    bool finished_ ABSL_GUARDED_BY(mu_) = false;
  };

  const FakeDecodeConfig config_;
  absl::Mutex mu_;
  std::vector<v1::DecodeRequest> decode_requests_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> aborted_ids_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> released_ids_ ABSL_GUARDED_BY(mu_);
  int num_reserves_ ABSL_GUARDED_BY(mu_) = 0;
  int num_cancelled_decodes_ ABSL_GUARDED_BY(mu_) = 0;
};

// Prefill returns `first_token`, or fails with `fail_code` when it is not OK.
class FakePrefillWorker final : public v1::PrefillWorker::CallbackService {
 public:
  FakePrefillWorker(int32_t first_token, grpc::StatusCode fail_code)
      : first_token_(first_token), fail_code_(fail_code) {}

  std::vector<v1::PrefillRequest> prefill_requests() {
    absl::MutexLock lock(&mu_);
    return prefill_requests_;
  }

  grpc::ServerUnaryReactor* Prefill(grpc::CallbackServerContext* context,
                                    const v1::PrefillRequest* request,
                                    v1::PrefillResponse* response) override {
    {
      absl::MutexLock lock(&mu_);
      prefill_requests_.push_back(*request);
    }
    auto* reactor = context->DefaultReactor();
    if (fail_code_ != grpc::StatusCode::OK) {
      reactor->Finish(grpc::Status(fail_code_, "fake prefill failure"));
    } else {
      response->set_first_token(first_token_);
      response->set_computed_tokens(request->prompt_ids_size());
      reactor->Finish(grpc::Status::OK);
    }
    return reactor;
  }

  grpc::ServerUnaryReactor* Abort(grpc::CallbackServerContext* context,
                                  const v1::WorkerAbortRequest*,
                                  v1::WorkerAbortResponse*) override {
    auto* reactor = context->DefaultReactor();
    reactor->Finish(grpc::Status::OK);
    return reactor;
  }

  grpc::ServerUnaryReactor* Status(grpc::CallbackServerContext* context,
                                   const v1::WorkerStatusRequest*,
                                   v1::WorkerStatusResponse* response) override {
    response->set_role("prefill");
    response->set_model("tiny_llama");
    auto* reactor = context->DefaultReactor();
    reactor->Finish(grpc::Status::OK);
    return reactor;
  }

 private:
  const int32_t first_token_;
  const grpc::StatusCode fail_code_;
  absl::Mutex mu_;
  std::vector<v1::PrefillRequest> prefill_requests_ ABSL_GUARDED_BY(mu_);
};

}  // namespace sparseserve::router::testing

#endif  // SPARSESERVE_TESTS_UNIT_ROUTER_FAKE_WORKERS_H_
