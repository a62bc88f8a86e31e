// Test-only writers of small GGUF and safetensors files, and the path of the stories260K mirror.
// Header-only; used by the model_*_test.cc files. Not thread-safe (temp dirs are per test).
#ifndef SPARSESERVE_TESTS_UNIT_MODEL_FILE_WRITERS_H_
#define SPARSESERVE_TESTS_UNIT_MODEL_FILE_WRITERS_H_

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "tests/testing/test_model.h"

namespace sparseserve::model::testing {

// Path of stories260K/<file> wherever tests/testing/test_model.h finds it ("" if nowhere).
inline std::string StoriesPath(const std::string& file) {
  return sparseserve::testing::FindTestModelFile(file);
}

inline bool ReadWholeFile(const std::string& path, std::string* out) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  out->assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  return true;
}

inline void WriteWholeFile(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// A fresh empty directory under the system temp dir, named after `tag`.
inline std::string MakeTempDir(const std::string& tag) {
  std::string templ = (std::filesystem::temp_directory_path() / ("ss_" + tag + "_XXXXXX")).string();
  std::vector<char> buf(templ.begin(), templ.end());
  buf.push_back('\0');
  const char* dir = ::mkdtemp(buf.data());
  return dir == nullptr ? std::string() : std::string(dir);
}

// Little-endian byte encoders.
template <typename T>
void Put(std::string* out, T value) {
  char bytes[sizeof(T)];
  std::memcpy(bytes, &value, sizeof(T));
  out->append(bytes, sizeof(T));
}

inline void PutGgufString(std::string* out, const std::string& s) {
  Put<uint64_t>(out, s.size());
  out->append(s);
}

// GGUF metadata entries, encoded (key, type, value).
inline std::string KvHeader(const std::string& key, uint32_t type) {
  std::string out;
  PutGgufString(&out, key);
  Put<uint32_t>(&out, type);
  return out;
}
template <typename T>
std::string KvScalar(const std::string& key, uint32_t type, T value) {
  std::string out = KvHeader(key, type);
  Put<T>(&out, value);
  return out;
}
inline std::string KvString(const std::string& key, const std::string& value) {
  std::string out = KvHeader(key, 8);
  PutGgufString(&out, value);
  return out;
}
inline std::string KvStringArray(const std::string& key, const std::vector<std::string>& v) {
  std::string out = KvHeader(key, 9);
  Put<uint32_t>(&out, 8);
  Put<uint64_t>(&out, v.size());
  for (const std::string& s : v) PutGgufString(&out, s);
  return out;
}
template <typename T>
std::string KvArray(const std::string& key, uint32_t elem_type, const std::vector<T>& v) {
  std::string out = KvHeader(key, 9);
  Put<uint32_t>(&out, elem_type);
  Put<uint64_t>(&out, v.size());
  for (T x : v) Put<T>(&out, x);
  return out;
}

struct GgufTestTensor {
  std::string name;
  uint32_t ggml_type = 0;
  std::vector<uint64_t> ne;  // ggml order: fastest dimension first
  std::string data;          // raw bytes
};

// A GGUF file: header, the given encoded kv entries, tensor infos with offsets laid out in
// order at `alignment`, padding, data. `alignment` only lays out the file; add a
// general.alignment entry to `kvs` when it is not 32.
inline std::string BuildGguf(const std::vector<std::string>& kvs,
                             const std::vector<GgufTestTensor>& tensors, uint64_t alignment = 32,
                             uint32_t version = 3) {
  std::string out = "GGUF";
  Put<uint32_t>(&out, version);
  Put<uint64_t>(&out, tensors.size());
  Put<uint64_t>(&out, kvs.size());
  for (const std::string& kv : kvs) out += kv;
  std::string data;
  for (const GgufTestTensor& t : tensors) {
    while (data.size() % alignment != 0) data.push_back('\0');
    PutGgufString(&out, t.name);
    Put<uint32_t>(&out, static_cast<uint32_t>(t.ne.size()));
    for (uint64_t n : t.ne) Put<uint64_t>(&out, n);
    Put<uint32_t>(&out, t.ggml_type);
    Put<uint64_t>(&out, data.size());
    data += t.data;
  }
  while (out.size() % alignment != 0) out.push_back('\0');
  return out + data;
}

template <typename T>
std::string RawBytes(const std::vector<T>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
}

struct SafetensorsTestTensor {
  std::string name;
  std::string dtype;
  std::vector<int64_t> shape;
  std::string data;
};

// A safetensors file with the tensors laid out in order; `metadata_json` (an object) becomes
// "__metadata__" when not empty. The header is padded with spaces to a multiple of 8.
inline std::string BuildSafetensors(const std::vector<SafetensorsTestTensor>& tensors,
                                    const std::string& metadata_json = "") {
  std::string header = "{";
  std::string data;
  if (!metadata_json.empty()) header += "\"__metadata__\":" + metadata_json;
  for (const SafetensorsTestTensor& t : tensors) {
    if (header.size() > 1) header += ",";
    header += absl::StrCat("\"", t.name, "\":{\"dtype\":\"", t.dtype, "\",\"shape\":[",
                           absl::StrJoin(t.shape, ","), "],\"data_offsets\":[", data.size(), ",",
                           data.size() + t.data.size(), "]}");
    data += t.data;
  }
  header += "}";
  while ((8 + header.size()) % 8 != 0) header.push_back(' ');
  std::string out;
  Put<uint64_t>(&out, header.size());
  return out + header + data;
}

// A safetensors file from a hand-written header (no padding) and data.
inline std::string RawSafetensors(const std::string& header, const std::string& data) {
  std::string out;
  Put<uint64_t>(&out, header.size());
  return out + header + data;
}

}  // namespace sparseserve::model::testing

#endif  // SPARSESERVE_TESTS_UNIT_MODEL_FILE_WRITERS_H_
