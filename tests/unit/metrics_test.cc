// Tests for common/metrics: the exporter serves the registry over real HTTP and ServingMetrics
// registers the ARCHITECTURE.md families with the role label.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/metrics/metrics_exporter.h"
#include "common/metrics/serving_metrics.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "prometheus/registry.h"
#include "prometheus/text_serializer.h"

namespace sparseserve::metrics {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// Minimal HTTP/1.0 GET over a POSIX socket to 127.0.0.1:`port`; returns the whole response
// (headers and body), or "" on a socket error. Bounded by a 5 s receive timeout.
std::string HttpGet(int port, const std::string& path) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return "";
  timeval timeout{};
  timeout.tv_sec = 5;
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &timeout, sizeof(timeout));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  std::string response;
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0) {
    const std::string request = absl::StrCat("GET ", path, " HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n");
    if (send(fd, request.data(), request.size(), 0) == static_cast<ssize_t>(request.size())) {
      char buffer[4096];
      ssize_t n;
      while ((n = recv(fd, buffer, sizeof(buffer), 0)) > 0) response.append(buffer, n);
    }
  }
  close(fd);
  return response;
}

TEST(MetricsExporterTest, ServesRegistryOnKernelChosenPort) {
  auto exporter = MetricsExporter::Start("127.0.0.1:0");
  ASSERT_TRUE(exporter.ok()) << exporter.status();
  EXPECT_GT((*exporter)->port(), 0);

  auto metrics = ServingMetrics::Create((*exporter)->registry(), ServiceRole::kDecode);
  ASSERT_TRUE(metrics.ok()) << metrics.status();
  ServingMetrics& m = **metrics;
  m.ttft().Observe(0.02);
  m.ttft().Observe(3.0);
  m.inter_token_latency().Observe(0.015);
  m.kv_transfer_time().Observe(0.0003);
  m.num_requests_running().Set(3);
  m.num_requests_waiting().Set(7);
  m.kv_cache_usage().Set(0.5);
  m.sparse_attention_density_decode().Set(0.25);
  m.prefix_cache_queries().Increment(10);
  m.prefix_cache_hits().Increment(4);
  m.kv_transfer_bytes().Increment(262144);
  m.generated_tokens().Increment(42);
  m.requests_finished("stop").Increment();
  m.requests_finished("stop").Increment();
  m.requests_finished("length").Increment();
  m.sparse_attention_error("sliding-window").Observe(0.003);
  m.sparse_attention_error("sliding-window").Observe(0);

  const std::string text = HttpGet((*exporter)->port(), "/metrics");
  ASSERT_THAT(text, HasSubstr("200 OK"));
  EXPECT_THAT(text, HasSubstr("sparseserve_time_to_first_token_seconds_count{role=\"decode\"} 2"));
  EXPECT_THAT(text, HasSubstr("sparseserve_time_to_first_token_seconds_sum{role=\"decode\"} 3.02"));
  // 0.02 s falls in the 25 ms bucket, 3 s only from the 5 s bucket up.
  EXPECT_THAT(text, HasSubstr("sparseserve_time_to_first_token_seconds_bucket{role=\"decode\","
                              "le=\"0.025\"} 1"));
  EXPECT_THAT(text, HasSubstr("sparseserve_time_to_first_token_seconds_bucket{role=\"decode\","
                              "le=\"5\"} 2"));
  EXPECT_THAT(text, HasSubstr("sparseserve_inter_token_latency_seconds_count{role=\"decode\"} 1"));
  EXPECT_THAT(text, HasSubstr("sparseserve_kv_transfer_seconds_bucket{role=\"decode\","
                              "le=\"0.0005\"} 1"));
  EXPECT_THAT(text, HasSubstr("sparseserve_num_requests_running{role=\"decode\"} 3"));
  EXPECT_THAT(text, HasSubstr("sparseserve_num_requests_waiting{role=\"decode\"} 7"));
  EXPECT_THAT(text, HasSubstr("sparseserve_kv_cache_usage_ratio{role=\"decode\"} 0.5"));
  EXPECT_THAT(
      text,
      HasSubstr("sparseserve_sparse_attention_density{phase=\"decode\",role=\"decode\"} 0.25"));
  EXPECT_THAT(text, HasSubstr("sparseserve_prefix_cache_queries_total{role=\"decode\"} 10"));
  EXPECT_THAT(text, HasSubstr("sparseserve_prefix_cache_hits_total{role=\"decode\"} 4"));
  EXPECT_THAT(text, HasSubstr("sparseserve_kv_transfer_bytes_total{role=\"decode\"} 262144"));
  EXPECT_THAT(text, HasSubstr("sparseserve_generated_tokens_total{role=\"decode\"} 42"));
  EXPECT_THAT(text,
              HasSubstr("sparseserve_requests_total{finish_reason=\"stop\",role=\"decode\"} 2"));
  EXPECT_THAT(text,
              HasSubstr("sparseserve_requests_total{finish_reason=\"length\",role=\"decode\"} 1"));
  // The shadow-dense monitor's histogram: one series per method, ratio buckets.
  EXPECT_THAT(text, HasSubstr("sparseserve_sparse_attention_error_bucket{method=\"sliding-window\","
                              "role=\"decode\",le=\"0.0001\"} 1"));
  EXPECT_THAT(text, HasSubstr("sparseserve_sparse_attention_error_bucket{method=\"sliding-window\","
                              "role=\"decode\",le=\"0.005\"} 2"));
  EXPECT_THAT(text, HasSubstr("sparseserve_sparse_attention_error_count{method=\"sliding-window\","
                              "role=\"decode\"} 2"));
  // Untouched counters are exported at zero; prometheus-cpp adds no second "_total".
  EXPECT_THAT(text, HasSubstr("sparseserve_request_migrations_total{role=\"decode\"} 0"));
  EXPECT_THAT(text, HasSubstr("# TYPE sparseserve_kv_reservation_expiries_total counter"));
  EXPECT_THAT(text, Not(HasSubstr("_total_total")));
}

TEST(ServingMetricsTest, RegistersEveryArchitectureFamily) {
  auto registry = std::make_shared<prometheus::Registry>();
  auto metrics = ServingMetrics::Create(registry, ServiceRole::kPrefill);
  ASSERT_TRUE(metrics.ok()) << metrics.status();
  // The exporter serves exactly this serialization (checked over HTTP above).
  const std::string text = prometheus::TextSerializer().Serialize(registry->Collect());
  for (const char* family : {"time_to_first_token_seconds histogram",
                             "inter_token_latency_seconds histogram",
                             "e2e_request_latency_seconds histogram",
                             "request_queue_time_seconds histogram",
                             "kv_transfer_seconds histogram",
                             "kv_staging_copy_seconds histogram",
                             "num_requests_running gauge",
                             "num_requests_waiting gauge",
                             "kv_cache_usage_ratio gauge",
                             "sparse_attention_density gauge",
                             "sparse_attention_error histogram",
                             "prefix_cache_queries_total counter",
                             "prefix_cache_hits_total counter",
                             "kv_transfer_bytes_total counter",
                             "kv_transfer_failures_total counter",
                             "kv_reservation_expiries_total counter",
                             "request_migrations_total counter",
                             "requests_total counter",
                             "spec_decode_draft_tokens_total counter",
                             "spec_decode_accepted_tokens_total counter",
                             "spec_decode_accepted_tokens_per_position_total counter",
                             "spec_decode_verify_steps_total counter",
                             "spec_decode_mean_accepted_length gauge",
                             "tokenselect_selection_cache_hits_total counter",
                             "tokenselect_selection_cache_queries_total counter",
                             "generated_tokens_total counter",
                             "prompt_tokens_total counter"}) {
    EXPECT_THAT(text, HasSubstr(absl::StrCat("# TYPE sparseserve_", family))) << family;
  }
  EXPECT_THAT(text, HasSubstr("sparseserve_prompt_tokens_total{role=\"prefill\"} 0"));
  // The standard finish reasons are exported at zero before any request finishes.
  EXPECT_THAT(
      text, HasSubstr("sparseserve_requests_total{finish_reason=\"aborted\",role=\"prefill\"} 0"));
}

TEST(MetricsExporterTest, SecondExporterOnSamePortFailsCleanly) {
  auto first = MetricsExporter::Start("127.0.0.1:0");
  ASSERT_TRUE(first.ok()) << first.status();
  auto second = MetricsExporter::Start(absl::StrCat("127.0.0.1:", (*first)->port()));
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(second.status().message(), HasSubstr(absl::StrCat((*first)->port())));
  // The first exporter is unaffected.
  EXPECT_THAT(HttpGet((*first)->port(), "/metrics"), HasSubstr("200 OK"));
}

TEST(MetricsExporterTest, EmptyAddressIsInvalidArgument) {
  EXPECT_EQ(MetricsExporter::Start("").status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(MetricsExporterTest, ColonPortMeansAllInterfaces) {
  // No scrape here: civetweb stops fast when it never served a connection.
  auto exporter = MetricsExporter::Start(":0");
  ASSERT_TRUE(exporter.ok()) << exporter.status();
  EXPECT_GT((*exporter)->port(), 0);
}

TEST(ServingMetricsTest, RolesShareOneRegistry) {
  auto registry = std::make_shared<prometheus::Registry>();
  auto router = ServingMetrics::Create(registry, ServiceRole::kRouter);
  auto decode = ServingMetrics::Create(registry, ServiceRole::kDecode);
  ASSERT_TRUE(router.ok()) << router.status();
  ASSERT_TRUE(decode.ok()) << decode.status();
  (*router)->request_migrations().Increment();
  EXPECT_EQ((*router)->request_migrations().Value(), 1.0);
  EXPECT_EQ((*decode)->request_migrations().Value(), 0.0);
  // The same role again reuses the existing series.
  auto router_again = ServingMetrics::Create(registry, ServiceRole::kRouter);
  ASSERT_TRUE(router_again.ok()) << router_again.status();
  EXPECT_EQ((*router_again)->request_migrations().Value(), 1.0);
  EXPECT_EQ(&(*router_again)->requests_finished("stop"), &(*router)->requests_finished("stop"));
}

TEST(ServingMetricsTest, ClashingFamilyTypeIsAnErrorNotAnException) {
  auto registry = std::make_shared<prometheus::Registry>();
  prometheus::BuildGauge().Name("sparseserve_generated_tokens_total").Register(*registry);
  auto metrics = ServingMetrics::Create(registry, ServiceRole::kDecode);
  ASSERT_FALSE(metrics.ok());
  EXPECT_EQ(metrics.status().code(), absl::StatusCode::kAlreadyExists);
}

TEST(ServingMetricsTest, LatencyBucketsSpanOneMillisecondToTwoMinutes) {
  const auto& buckets = kLatencyBuckets;
  EXPECT_DOUBLE_EQ(buckets.front(), 0.001);
  EXPECT_DOUBLE_EQ(buckets.back(), 120.0);
  for (size_t i = 1; i < buckets.size(); ++i) EXPECT_LT(buckets[i - 1], buckets[i]);
  EXPECT_EQ(ServiceRoleName(ServiceRole::kPrefill), "prefill");
}

}  // namespace
}  // namespace sparseserve::metrics
