// safetensors parsing (well-formed and broken files written byte by byte here), F16/BF16
// conversion on load, and the checkpoint directory reader (single file, sharded index, and
// every way a directory can be wrong).
#include <catch2/catch.hpp>

#include <cmath>
#include <span>

#include "runtime/error.hpp"
#include "runtime/checkpoint/checkpoint.hpp"
#include "runtime/checkpoint/safetensors.hpp"
#include "runtime/models/weights.hpp"
#include "tests/runtime/test_checkpoint_writer.hpp"

using namespace troupe;
using namespace troupe::testing;
using Catch::Matchers::Contains;

namespace {

std::string f32_bytes(std::vector<float> v) {
  return as_bytes(v);
}

// Expects open() to throw a troupe::Error whose message contains every fragment.
void expect_open_error(const std::string& file_bytes, std::vector<std::string> fragments) {
  TempDir dir("st_err");
  const auto p = dir.path() / "bad.safetensors";
  write_bytes(p, file_bytes);
  try {
    (void)SafetensorsFile::open(p);
    FAIL("no error for a broken file; wanted one mentioning " << fragments.front());
  } catch (const Error& e) {
    const std::string msg = e.what();
    INFO(msg);
    CHECK_THAT(msg, Contains(p.string()));
    for (const auto& f : fragments) CHECK_THAT(msg, Contains(f));
  }
}

}  // namespace

TEST_CASE("safetensors: tensors, dtypes, shapes and metadata are read", "[checkpoint]") {
  TempDir dir("st_ok");
  const auto p = dir.path() / "model.safetensors";
  std::vector<int64_t> i64 = {-1, 1LL << 40};
  std::vector<int32_t> i32 = {7, -8, 9};
  write_bytes(p, make_safetensors(
                     {
                         {"a.weight", "F32", {2, 3}, f32_bytes({1, 2, 3, 4, 5, 6})},
                         {"b", "I64", {2}, as_bytes(i64)},
                         {"c", "I32", {3}, as_bytes(i32)},
                         {"scalar", "F32", {}, f32_bytes({42})},
                         {"empty", "F16", {0, 4}, ""},
                         {"f64", "F64", {1}, std::string(8, '\0')},
                     },
                     {{"format", "pt"}}));
  const auto f = SafetensorsFile::open(p);
  CHECK(f.entries().size() == 6);
  CHECK(f.metadata().at("format") == "pt");
  CHECK(f.contains("a.weight"));
  CHECK_FALSE(f.contains("a"));

  const TensorInfo a = f.get("a.weight");
  CHECK(a.dtype == DType::f32);
  CHECK(a.shape == std::vector<int64_t>{2, 3});
  CHECK(a.nbytes == 24);
  std::vector<float> av(6);
  std::memcpy(av.data(), a.data, 24);
  CHECK(av == std::vector<float>{1, 2, 3, 4, 5, 6});

  const TensorInfo b = f.get("b");
  CHECK(b.dtype == DType::i64);
  int64_t b1;
  std::memcpy(&b1, static_cast<const char*>(b.data) + 8, 8);
  CHECK(b1 == (1LL << 40));
  CHECK(f.get("c").dtype == DType::i32);
  CHECK(f.get("scalar").shape.empty());
  CHECK(f.get("scalar").numel() == 1);
  CHECK(f.get("empty").nbytes == 0);

  // F64 is a valid safetensors dtype that troupe does not compute in: an error on use only.
  CHECK(f.entries().at("f64").st_dtype == "F64");
  CHECK_THROWS_WITH(f.get("f64"), Contains("f64") && Contains("F64") && Contains("cannot load"));
  CHECK_THROWS_WITH(f.get("nope"), Contains("no tensor 'nope'"));
}

TEST_CASE("safetensors: broken files are rejected with the file and tensor named", "[checkpoint]") {
  const std::string good_header = R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  const std::string data8 = f32_bytes({1, 2});

  SECTION("shorter than the length prefix") {
    expect_open_error("abc", {"truncated"});
  }
  SECTION("empty file") {
    expect_open_error("", {"truncated"});
  }
  SECTION("header length beyond the file") {
    expect_open_error(raw_safetensors(1000, good_header, data8), {"header length 1000"});
  }
  SECTION("absurd header length") {
    expect_open_error(raw_safetensors(~0ull, good_header, data8), {"header length"});
  }
  SECTION("header is not JSON") {
    const std::string h = R"({"w":{"dtype":"F32",)";
    expect_open_error(raw_safetensors(h.size(), h, data8), {"not valid JSON"});
  }
  SECTION("header holds a number beyond a double") {
    // out_of_range, not parse_error, from nlohmann (found by the safetensors_header fuzz target)
    const std::string h = R"({"w":{"dtype":"F32","shape":[2e400],"data_offsets":[0,8]}})";
    expect_open_error(raw_safetensors(h.size(), h, data8), {"not valid JSON", "overflow"});
  }
  SECTION("header is JSON but not an object") {
    const std::string h = "[1,2]";
    expect_open_error(raw_safetensors(h.size(), h, data8), {"not a JSON object"});
  }
  SECTION("unknown dtype") {
    const std::string h = R"({"w":{"dtype":"F33","shape":[2],"data_offsets":[0,8]}})";
    expect_open_error(raw_safetensors(h.size(), h, data8), {"'w'", "unknown dtype \"F33\""});
  }
  SECTION("offsets past the data") {
    const std::string h = R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})";
    expect_open_error(raw_safetensors(h.size(), h, data8), {"'w'", "out of range"});
  }
  SECTION("truncated data") {
    expect_open_error(raw_safetensors(good_header.size(), good_header, data8.substr(0, 5)),
                      {"'w'", "out of range", "truncated"});
  }
  SECTION("begin after end") {
    const std::string h = R"({"w":{"dtype":"F32","shape":[0],"data_offsets":[8,4]}})";
    expect_open_error(raw_safetensors(h.size(), h, data8), {"'w'", "out of range"});
  }
  SECTION("byte count disagrees with the shape") {
    const std::string h = R"({"w":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})";
    expect_open_error(raw_safetensors(h.size(), h, data8), {"'w'", "needs 12 bytes"});
  }
  SECTION("overlapping tensors") {
    const std::string h = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                          R"("b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})";
    expect_open_error(raw_safetensors(h.size(), h, data8), {"'a'", "'b'", "overlap"});
  }
  SECTION("negative dimension") {
    const std::string h = R"({"w":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})";
    expect_open_error(raw_safetensors(h.size(), h, data8), {"'w'", "shape"});
  }
  SECTION("a shape whose running product passes int64 before a zero dimension") {
    // 0 elements, but TensorInfo::numel() multiplies left to right and overflowed int64.
    const std::string h =
        R"({"w":{"dtype":"F32","shape":[4611686018427387904,3,0],"data_offsets":[0,0]}})";
    expect_open_error(raw_safetensors(h.size(), h, ""), {"'w'", "overflows"});
  }
  SECTION("missing data_offsets") {
    const std::string h = R"({"w":{"dtype":"F32","shape":[2]}})";
    expect_open_error(raw_safetensors(h.size(), h, data8), {"'w'", "data_offsets"});
  }
  SECTION("metadata that is not strings") {
    const std::string h =
        R"({"__metadata__":{"format":3},"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
    expect_open_error(raw_safetensors(h.size(), h, data8), {"__metadata__"});
  }
}

TEST_CASE("safetensors: read_header checks bytes in memory as open() checks a file",
          "[checkpoint]") {
  const std::string bytes = make_safetensors(
      {{"a", "F32", {2}, f32_bytes({1, 2})}, {"b", "BF16", {1, 3}, std::string(6, '\x01')}},
      {{"format", "pt"}});
  TempDir dir("st_mem");
  const auto p = dir.path() / "m.safetensors";
  write_bytes(p, bytes);
  const auto file = SafetensorsFile::open(p);
  const auto* data = reinterpret_cast<const unsigned char*>(bytes.data());
  const SafetensorsFile::Header h =
      SafetensorsFile::read_header(std::span(data, bytes.size()), "in memory");
  CHECK(h.metadata == file.metadata());
  REQUIRE(h.entries.size() == 2);
  for (const auto& [name, e] : file.entries()) {
    const auto& m = h.entries.at(name);
    CHECK(m.st_dtype == e.st_dtype);
    CHECK(m.shape == e.shape);
    CHECK(m.offset == e.offset);
    CHECK(m.nbytes == e.nbytes);
  }
  // A cut copy is refused naming its origin, as open() names the path.
  CHECK_THROWS_WITH(SafetensorsFile::read_header(std::span(data, bytes.size() - 1), "in memory"),
                    Contains("in memory") && Contains("out of range"));
}

TEST_CASE("safetensors: a missing file is an error naming it", "[checkpoint]") {
  CHECK_THROWS_WITH(SafetensorsFile::open("/nonexistent/x.safetensors"),
                    Contains("/nonexistent/x.safetensors") && Contains("cannot open"));
}

TEST_CASE("checkpoint: F16 and BF16 weights convert to f32 exactly", "[checkpoint]") {
  // Bit patterns and the values they stand for (exact in both formats).
  const std::vector<uint16_t> f16 = {0x3C00, 0xC100, 0x7BFF, 0x0001, 0x3555, 0x8000};
  const std::vector<double> f16_val = {1.0, -2.5, 65504.0, std::ldexp(1.0, -24), 0.333251953125,
                                       -0.0};
  const std::vector<uint16_t> bf16 = {0x3F80, 0xC020, 0x4049, 0x0001, 0x7F7F, 0x3EAB};
  const std::vector<double> bf16_val = {
      1.0, -2.5, 3.140625, std::ldexp(1.0, -133), 3.3895313892515355e38, 0.333984375};
  TempDir dir("st_conv");
  write_text(dir.path() / "config.json", tiny_config_json());
  // A 1-byte pad tensor first puts the others at odd offsets: conversion must not assume
  // aligned data.
  write_bytes(
      dir.path() / "model.safetensors",
      make_safetensors({{"pad", "U8", {1}, std::string(1, '\x05')},
                        {"h", "F16", {2, 3}, as_bytes(f16)},
                        {"b", "BF16", {6}, as_bytes(bf16)},
                        {"ties", "F16", {2}, as_bytes(std::vector<uint16_t>{0x3C04, 0x3C0C})}}));
  const auto ck = CheckpointReader::open(dir.path());
  const TensorInfo h = ck.get("h");
  CHECK(h.dtype == DType::f16);
  CHECK(reinterpret_cast<uintptr_t>(h.data) % 2 == 1);

  std::vector<float> out(6);
  copy_shard(h, WeightSpec{"h", {2, 3}, Shard::replicated}, ParallelRank{}, out.data(), DType::f32);
  for (size_t i = 0; i < 6; ++i) CHECK(double(out[i]) == f16_val[i]);
  CHECK(std::signbit(out[5]));

  copy_shard(ck.get("b"), WeightSpec{"b", {6}, Shard::replicated}, ParallelRank{}, out.data(),
             DType::f32);
  for (size_t i = 0; i < 6; ++i) CHECK(double(out[i]) == bf16_val[i]);

  // f16 -> bf16 rounds to nearest, ties to even: 1 + 4/1024 and 1 + 12/1024 sit exactly
  // halfway between bf16 neighbours and go to the even one (0x3F80, 0x3F82).
  std::vector<uint16_t> as_bf16(2);
  copy_shard(ck.get("ties"), WeightSpec{"ties", {2}, Shard::replicated}, ParallelRank{},
             as_bf16.data(), DType::bf16);
  CHECK(as_bf16[0] == 0x3F80);
  CHECK(as_bf16[1] == 0x3F82);
}

TEST_CASE("checkpoint: single-file directory", "[checkpoint]") {
  TempDir dir("ck_single");
  write_text(dir.path() / "config.json", tiny_config_json());
  write_bytes(
      dir.path() / "model.safetensors",
      make_safetensors({{"x", "F32", {1}, f32_bytes({3})}, {"y", "F32", {2}, f32_bytes({4, 5})}}));
  const auto ck = CheckpointReader::open(dir.path());
  CHECK(ck.names() == std::vector<std::string>{"x", "y"});
  CHECK(ck.contains("y"));
  CHECK_FALSE(ck.contains("z"));
  CHECK(ck.get("y").shape == std::vector<int64_t>{2});
  CHECK_THROWS_WITH(ck.get("z"), Contains("no tensor 'z'") && Contains(dir.path().string()));
  CHECK(ck.files().size() == 1);
}

namespace {

// Two shards and an index; `index` overrides the index text when non-empty.
void write_sharded(const std::filesystem::path& d, const std::string& index = "") {
  write_text(d / "config.json", tiny_config_json());
  write_bytes(
      d / "model-00001-of-00002.safetensors",
      make_safetensors({{"a", "F32", {1}, f32_bytes({1})}, {"b", "F32", {1}, f32_bytes({2})}}));
  write_bytes(d / "model-00002-of-00002.safetensors",
              make_safetensors({{"c", "F32", {2}, f32_bytes({3, 4})}}));
  write_text(d / "model.safetensors.index.json",
             index.empty() ? R"({"metadata": {"total_size": 16}, "weight_map": {
                 "a": "model-00001-of-00002.safetensors", "b": "model-00001-of-00002.safetensors",
                 "c": "model-00002-of-00002.safetensors"}})"
                           : index);
}

void expect_dir_error(const std::filesystem::path& d, std::vector<std::string> fragments) {
  try {
    (void)CheckpointReader::open(d);
    FAIL("no error; wanted one mentioning " << fragments.front());
  } catch (const Error& e) {
    const std::string msg = e.what();
    INFO(msg);
    for (const auto& f : fragments) CHECK_THAT(msg, Contains(f));
  }
}

}  // namespace

TEST_CASE("checkpoint: sharded directory through the index", "[checkpoint]") {
  TempDir dir("ck_sharded");
  write_sharded(dir.path());
  const auto ck = CheckpointReader::open(dir.path());
  CHECK(ck.names() == std::vector<std::string>{"a", "b", "c"});
  CHECK(ck.files().size() == 2);
  const TensorInfo c = ck.get("c");
  std::vector<float> cv(2);
  std::memcpy(cv.data(), c.data, 8);
  CHECK(cv == std::vector<float>{3, 4});
  // The index wins over a stray single file.
  write_bytes(dir.path() / "model.safetensors",
              make_safetensors({{"zz", "F32", {1}, f32_bytes({0})}}));
  CHECK_FALSE(CheckpointReader::open(dir.path()).contains("zz"));
}

TEST_CASE("checkpoint: every broken directory gets its own clear error", "[checkpoint]") {
  TempDir dir("ck_bad");
  const auto d = dir.path();

  SECTION("missing directory") {
    expect_dir_error(d / "nope", {"model directory", (d / "nope").string(), "does not exist"});
  }
  SECTION("missing config.json") {
    write_bytes(d / "model.safetensors", make_safetensors({{"x", "F32", {1}, f32_bytes({3})}}));
    expect_dir_error(d, {"config.json", "not found"});
  }
  SECTION("no weights file") {
    write_text(d / "config.json", tiny_config_json());
    expect_dir_error(d, {"no weights", "model.safetensors"});
  }
  SECTION("only pytorch_model.bin") {
    write_text(d / "config.json", tiny_config_json());
    write_bytes(d / "pytorch_model.bin", "PK");
    expect_dir_error(d, {"no weights", "pytorch_model.bin is not supported"});
  }
  SECTION("index is not JSON") {
    write_sharded(d, "{\"weight_map\": ");
    expect_dir_error(d, {"model.safetensors.index.json", "not valid JSON"});
  }
  SECTION("index holds a number beyond a double") {
    write_sharded(d, R"({"metadata": {"total_size": 1e999}, "weight_map": {}})");
    expect_dir_error(d, {"model.safetensors.index.json", "not valid JSON"});
  }
  SECTION("index without weight_map") {
    write_sharded(d, R"({"metadata": {}})");
    expect_dir_error(d, {"model.safetensors.index.json", "weight_map"});
  }
  SECTION("index names a missing shard") {
    write_sharded(d, R"({"weight_map": {"a": "model-00001-of-00002.safetensors",
                                        "q": "model-00009-of-00009.safetensors"}})");
    expect_dir_error(d, {"model-00009-of-00009.safetensors", "does not exist"});
  }
  SECTION("index puts a tensor in the wrong shard") {
    write_sharded(d, R"({"weight_map": {"a": "model-00002-of-00002.safetensors",
                                        "c": "model-00002-of-00002.safetensors"}})");
    expect_dir_error(d, {"tensor 'a'", "model-00002-of-00002.safetensors", "does not hold it"});
  }
  SECTION("index names a tensor no shard has") {
    write_sharded(d, R"({"weight_map": {"ghost": "model-00001-of-00002.safetensors"}})");
    expect_dir_error(d, {"tensor 'ghost'", "does not hold it"});
  }
  SECTION("index escapes the directory") {
    write_sharded(d, R"({"weight_map": {"a": "../model-00001-of-00002.safetensors"}})");
    expect_dir_error(d, {"not a file name inside the directory"});
  }
  SECTION("a tensor stored in two shards") {
    write_sharded(d);
    write_bytes(d / "model-00002-of-00002.safetensors",
                make_safetensors(
                    {{"c", "F32", {2}, f32_bytes({3, 4})}, {"a", "F32", {1}, f32_bytes({9})}}));
    expect_dir_error(d, {"tensor 'a'", "stored twice"});
  }
  SECTION("a corrupt shard") {
    write_sharded(d);
    write_bytes(d / "model-00002-of-00002.safetensors", raw_safetensors(16, "{", ""));
    expect_dir_error(d, {"model-00002-of-00002.safetensors", "header length 16 runs past"});
  }
}
