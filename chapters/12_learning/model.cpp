// Chapter 12's model: its forward by hand, and the checks its backward makes. What it demonstrates: that a
// transformer is chapters 02 and 11 put together; its backward (model_backward.hpp around the learner's
// layer_backward) adds chapter 10. What it leaves out: LayerNorm, MLPs and batching inside one matrix product
// (sequences run one at a time). Book page: book/12_learning.md.
#include "12_learning/model.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <numeric>
#include <regex>

#include <fmt/format.h>
#include <xtensor/xnpy.hpp>

#include "02_qkv_trace/qkv_trace.hpp"
#include "11_positions/positions.hpp"
#include "attn/checks.hpp"

namespace attn::ch12 {

namespace {

std::size_t head_width(const Config& c) { return c.d_model / c.heads; }

/// Columns h·d_k … (h + 1)·d_k − 1 of \p M: (n, d_k).
Matrix head_columns(const Matrix& M, std::size_t h, std::size_t d_k) {
  return xt::view(M, xt::all(), xt::range(h * d_k, (h + 1) * d_k));
}

bool head_kept(const HeadMask& keep, std::size_t l, std::size_t h) { return keep.empty() || keep.at(l).at(h); }

/// A head mask is empty (every head runs) or has one flag per head of every layer.
void require_head_mask(const char* where, const HeadMask& keep, const Config& c) {
  if (keep.empty()) return;
  require(keep.size() == c.layers,
          fmt::format("{}: the head mask has {} layers, the model {}", where, keep.size(), c.layers));
  for (std::size_t l = 0; l < keep.size(); ++l)
    require(keep[l].size() == c.heads, fmt::format("{}: the head mask has {} heads in layer {}, the model {}", where,
                                                   keep[l].size(), l + 1, c.heads));
}

/// The checks of a configuration, before anything is allocated: no size 0, an even head width, a finite RoPE
/// base above 1, and every parameter together small enough to fit in memory (with the estimate).
void require_config(const char* where, const Config& c) {
  require(c.vocab > 0 && c.d_model > 0 && c.heads > 0 && c.layers > 0 && c.context > 0,
          fmt::format("{}: vocab = {}, d_model = {}, heads = {}, layers = {}, context = {}: none may be 0", where,
                      c.vocab, c.d_model, c.heads, c.layers, c.context));
  require(c.d_model % c.heads == 0 && head_width(c) % 2 == 0,
          fmt::format("{}: d_model = {} over {} heads must give an even head width (RoPE rotates pairs)", where,
                      c.d_model, c.heads));
  require(std::isfinite(c.rope_base) && c.rope_base > 1.0f,
          fmt::format("{}: rope_base = {} must be a finite number above 1", where, c.rope_base));
  // embed and unembed are (vocab, d_model) each, every layer four (d_model, d_model).
  const std::size_t per_layer = checked_product(where, {4, c.d_model, c.d_model});
  const std::size_t floats = checked_sum(
      where, {checked_product(where, {2, c.vocab, c.d_model}), checked_product(where, {c.layers, per_layer})});
  checked_allocation(fmt::format("{}: the parameters (2·vocab·d_model + layers·4·d_model²) floats", where).c_str(),
                     {floats, sizeof(float)});
}

}  // namespace

Model init_model(const Config& c, std::uint64_t seed) {
  require_config("init_model", c);
  Rng rng(seed);
  const float d = static_cast<float>(c.d_model);
  Model m;
  m.config = c;
  m.embed = rng.normal(c.vocab, c.d_model, 0.0f, 1.0f);  // (vocab, d): unit-size rows in the stream
  for (std::size_t l = 0; l < c.layers; ++l) {
    // 1/√d keeps each projection's output the size of its input.
    const float s = 1.0f / std::sqrt(d);
    m.layers.push_back({rng.normal(c.d_model, c.d_model, 0.0f, s), rng.normal(c.d_model, c.d_model, 0.0f, s),
                        rng.normal(c.d_model, c.d_model, 0.0f, s), rng.normal(c.d_model, c.d_model, 0.0f, s)});
  }
  m.unembed = rng.normal(c.d_model, c.vocab, 0.0f, 1.0f / std::sqrt(d));  // (d, vocab)
  return m;
}

Model zeros_like(const Model& like) {
  Model z = like;
  for (Matrix* p : parameters(z)) p->fill(0.0f);
  return z;
}

std::vector<Matrix*> parameters(Model& m) {
  std::vector<Matrix*> out{&m.embed};
  for (Layer& L : m.layers)
    for (Matrix* p : {&L.W_Q, &L.W_K, &L.W_V, &L.W_O}) out.push_back(p);
  out.push_back(&m.unembed);
  return out;
}

std::vector<const Matrix*> parameters(const Model& m) {
  std::vector<const Matrix*> out{&m.embed};
  for (const Layer& L : m.layers)
    for (const Matrix* p : {&L.W_Q, &L.W_K, &L.W_V, &L.W_O}) out.push_back(p);
  out.push_back(&m.unembed);
  return out;
}

namespace {

/// The file and the shape of parameter \p i of a model configured as \p c, in parameters()' order:
/// embed.npy (vocab, d_model), layerL_W_Q/K/V/O.npy (d_model, d_model), unembed.npy (d_model, vocab).
struct ParameterFile {
  std::string name;
  std::size_t rows, cols;
};

ParameterFile parameter_file(const Config& c, std::size_t i) {
  if (i == 0) return {"embed.npy", c.vocab, c.d_model};
  if (i > 4 * c.layers) return {"unembed.npy", c.d_model, c.vocab};
  return {fmt::format("layer{}_W_{}.npy", (i - 1) / 4 + 1, "QKVO"[(i - 1) % 4]), c.d_model, c.d_model};
}

[[noreturn]] void refuse_file(const std::filesystem::path& path, const std::string& why) {
  throw std::invalid_argument(fmt::format("load_checkpoint: {} {}", path.string(), why));
}

/// The shape a .npy file's header declares, after checking everything xt::load_npy does not: the magic
/// string, a complete header of the little-endian \p descr type in C order, a shape of sizes, and exactly
/// the data bytes that shape needs in the rest of the file (a truncated, header-only or padded file, or a
/// header that lies about its shape, is refused before any data is read).
std::vector<std::size_t> npy_shape(const std::filesystem::path& path, const char* descr) {
  if (!std::filesystem::is_regular_file(path)) refuse_file(path, "is missing");
  std::ifstream in(path, std::ios::binary);
  char magic[10] = {};
  if (!in.read(magic, 10) || std::memcmp(magic, "\x93NUMPY", 6) != 0)
    refuse_file(path, "is not a .npy file (no \\x93NUMPY magic string and version)");
  const auto byte = [&](int k) { return static_cast<std::size_t>(static_cast<unsigned char>(magic[k])); };
  std::size_t header_length = byte(8) | byte(9) << 8, prefix = 10;
  if (byte(6) >= 2) {  // versions 2 and 3: a 4-byte header length
    char more[2] = {};
    if (!in.read(more, 2)) refuse_file(path, "ends inside its header");
    header_length |= static_cast<std::size_t>(static_cast<unsigned char>(more[0])) << 16 |
                     static_cast<std::size_t>(static_cast<unsigned char>(more[1])) << 24;
    prefix = 12;
  }
  const std::uintmax_t file_bytes = std::filesystem::file_size(path);
  if (header_length > file_bytes - prefix) refuse_file(path, "ends inside its header");
  std::string header(header_length, '\0');
  in.read(header.data(), static_cast<std::streamsize>(header_length));
  const auto field = [&](const char* key) {
    const std::size_t at = header.find(key);
    if (at == std::string::npos) refuse_file(path, fmt::format("has no {} in its header", key));
    return at + std::strlen(key);
  };
  // Where the value of \p key starts: a header that ends in spaces after the key has none (found by fuzzing: the
  // comparison below was given npos and threw std::out_of_range).
  const auto value = [&](const char* key) {
    const std::size_t at = header.find_first_not_of(" ", field(key));
    if (at == std::string::npos) refuse_file(path, fmt::format("has no value after {} in its header", key));
    return at;
  };
  if (header.compare(value("'descr':"), std::strlen(descr) + 2, fmt::format("'{}'", descr)) != 0)
    refuse_file(path, fmt::format("does not hold {} values (its header: {})", descr, header));
  if (header.compare(value("'fortran_order':"), 5, "False") != 0)
    refuse_file(path, "is in Fortran order; a checkpoint is in C (row-major) order");
  const std::size_t open = header.find('(', field("'shape':")), close = header.find(')', open);
  if (open == std::string::npos || close == std::string::npos) refuse_file(path, "has no shape tuple in its header");
  std::vector<std::size_t> shape;
  std::string entry;
  for (std::size_t k = open + 1; k <= close; ++k) {
    const char ch = header[k];
    if (ch != ',' && ch != ')') {
      if (ch != ' ') entry += ch;
      continue;
    }
    if (entry.empty()) continue;  // "(6,)": the comma of a 1-tuple
    const bool digits = entry.size() <= 19 && std::all_of(entry.begin(), entry.end(), [](char c) {
                          return std::isdigit(static_cast<unsigned char>(c)) != 0;
                        });
    if (!digits) refuse_file(path, fmt::format("declares a shape entry of {}, which is not a size", entry));
    shape.push_back(std::stoull(entry));
    entry.clear();
  }
  std::size_t data_bytes = sizeof(float) * (descr[2] == '8' ? 2 : 1);
  for (std::size_t extent : shape) {
    if (extent != 0 && data_bytes > std::numeric_limits<std::size_t>::max() / extent)
      refuse_file(path, fmt::format("declares the shape {}, whose size does not fit in 64 bits",
                                    header.substr(open, close - open + 1)));
    data_bytes *= extent;
  }
  if (file_bytes - prefix - header_length != data_bytes)
    refuse_file(path,
                fmt::format("holds {} bytes of data where its header's shape {} needs {}: it is truncated or "
                            "its header lies",
                            file_bytes - prefix - header_length, header.substr(open, close - open + 1), data_bytes));
  return shape;
}

/// "(24, 32)", or "(6,)" as NumPy writes a 1-tuple.
std::string tuple_str(const std::vector<std::size_t>& shape) {
  std::string list;
  for (std::size_t e : shape) list += (list.empty() ? "" : ", ") + std::to_string(e);
  return "(" + list + (shape.size() == 1 ? ",)" : ")");
}

/// Refuses the .npy file \p path, before reading its data, unless npy_shape() accepts it and finds \p shape.
template <class T>
void require_npy(const std::filesystem::path& path, const std::vector<std::size_t>& shape) {
  const std::vector<std::size_t> found = npy_shape(path, sizeof(T) == 4 ? "<f4" : "<f8");
  if (found != shape)
    refuse_file(path,
                fmt::format("is {}; the configuration in config.npy needs {}", tuple_str(found), tuple_str(shape)));
}

/// The .npy file \p path as a T array of \p shape (checked first by require_npy()).
template <class T>
xt::xarray<T> read_npy(const std::filesystem::path& path, const std::vector<std::size_t>& shape) {
  require_npy<T>(path, shape);
  xt::xarray<T> a;
  try {
    a = xt::load_npy<T>(path.string());
  } catch (const std::exception& e) {
    refuse_file(path, fmt::format("is not a readable .npy file ({})", e.what()));
  }
  // xtensor's reader parses the header again, by its own rules: a header that says its keys twice can read as another
  // shape there (found by fuzzing: a (2, 4) header read as more dimensions, which the assignment to a Matrix then
  // wrote past its two-entry shape, corrupting the model). The shape read must be the one checked.
  const std::vector<std::size_t> read(a.shape().begin(), a.shape().end());
  if (read != shape)
    refuse_file(path, fmt::format("reads as {} where its header was checked as {} (a header that repeats a key)",
                                  tuple_str(read), tuple_str(shape)));
  return a;
}

}  // namespace

namespace {

/// Is \p name a file save_checkpoint() writes (config.npy, embed.npy, unembed.npy, layerL_W_Q/K/V/O.npy) or
/// the marker?
bool checkpoint_file_name(const std::string& name) {
  static const std::regex layer_file("layer[0-9]+_W_[QKVO]\\.npy");
  return name == kCheckpointMarker || name == "config.npy" || name == "embed.npy" || name == "unembed.npy" ||
         std::regex_match(name, layer_file);
}

[[noreturn]] void refuse_dir(const std::string& dir, const std::string& why) {
  // A path of thousands of bytes is shown by its beginning and its length.
  const std::string shown = dir.size() <= 200 ? dir : dir.substr(0, 200) + fmt::format("… ({} bytes)", dir.size());
  throw std::invalid_argument(fmt::format("save_checkpoint: the folder dir = '{}' {}", shown, why));
}

}  // namespace

void prepare_checkpoint_dir(const std::string& dir) {
  namespace fs = std::filesystem;
  if (dir.empty()) throw std::invalid_argument("save_checkpoint: the folder dir is empty text; name a folder");
  // The system reads a path up to its first NUL: "a\0b" would name the folder "a", not the one given.
  if (const std::size_t nul = dir.find('\0'); nul != std::string::npos)
    throw std::invalid_argument(fmt::format(
        "save_checkpoint: the folder dir holds a NUL byte at {} of its {}; a path cannot", nul, dir.size()));
  const fs::path folder(dir), marker = folder / kCheckpointMarker;
  std::error_code ec;
  if (fs::exists(folder, ec)) {
    if (!fs::is_directory(folder, ec)) refuse_dir(dir, "exists and is not a folder");
    bool empty = true, marked = false;
    std::string foreign;
    for (fs::directory_iterator it(folder, ec), end; !ec && it != end; it.increment(ec)) {
      const std::string name = it->path().filename().string();
      empty = false;
      marked = marked || name == kCheckpointMarker;
      if (foreign.empty() && (!checkpoint_file_name(name) || !it->is_regular_file())) foreign = name;
    }
    if (ec) refuse_dir(dir, "cannot be read: " + ec.message());
    if (!empty && (!marked || !foreign.empty()))
      refuse_dir(
          dir, fmt::format("holds files this chapter did not write ({}); give a new or empty folder, or one "
                           "an earlier --save-checkpoint wrote (it holds {})",
                           foreign.empty() ? "and no " + std::string(kCheckpointMarker) : foreign, kCheckpointMarker));
  } else if (!fs::create_directories(folder, ec) || ec) {
    refuse_dir(dir, "cannot be created: " + (ec ? ec.message() : std::string("unknown error")));
  }
  std::ofstream out(marker, std::ios::trunc);
  out << "A checkpoint of chapter 12's model, written by ch12_learning --save-checkpoint (attn::ch12::save_checkpoint)."
         "\nRead it with attn::ch12::load_checkpoint or numpy.load; a later run may replace these files.\n";
  if (!out) refuse_dir(dir, "cannot be written into");
}

void save_checkpoint(const Model& model, const std::string& dir) {
  const std::filesystem::path folder(dir);
  require_model("save_checkpoint", model);  // before the folder is touched
  prepare_checkpoint_dir(dir);
  const Config& c = model.config;
  const xt::xtensor<double, 1> config{static_cast<double>(c.vocab),   static_cast<double>(c.d_model),
                                      static_cast<double>(c.heads),   static_cast<double>(c.layers),
                                      static_cast<double>(c.context), static_cast<double>(c.rope_base)};
  xt::dump_npy((folder / "config.npy").string(), config);
  const std::vector<const Matrix*> P = parameters(model);
  for (std::size_t i = 0; i < P.size(); ++i) xt::dump_npy((folder / parameter_file(c, i).name).string(), *P[i]);
}

Model load_checkpoint(const std::string& dir) {
  const std::filesystem::path folder(dir);
  const xt::xarray<double> saved = read_npy<double>(folder / "config.npy", {6});
  for (std::size_t i = 0; i < 5; ++i)  // five sizes, then RoPE's base
    require(
        saved(i) >= 1.0 && saved(i) <= 1e9 && saved(i) == std::floor(saved(i)),
        fmt::format("load_checkpoint: {} holds {} where a size belongs", (folder / "config.npy").string(), saved(i)));
  require(saved(5) > 0.0 && std::isfinite(saved(5)),
          fmt::format("load_checkpoint: {} holds a RoPE base of {}", (folder / "config.npy").string(), saved(5)));
  Config c;
  c.vocab = static_cast<std::size_t>(saved(0));
  c.d_model = static_cast<std::size_t>(saved(1));
  c.heads = static_cast<std::size_t>(saved(2));
  c.layers = static_cast<std::size_t>(saved(3));
  c.context = static_cast<std::size_t>(saved(4));
  c.rope_base = static_cast<float>(saved(5));
  require_config(fmt::format("load_checkpoint: the configuration in {}", (folder / "config.npy").string()).c_str(), c);
  // Every weight file's header and size first: nothing is allocated for a file that is missing or lies.
  const std::size_t count = 4 * c.layers + 2;
  for (std::size_t i = 0; i < count; ++i) {
    const ParameterFile f = parameter_file(c, i);
    require_npy<float>(folder / f.name, {f.rows, f.cols});
  }
  Model m;
  m.config = c;
  m.layers.resize(c.layers);
  const std::vector<Matrix*> P = parameters(m);
  for (std::size_t i = 0; i < count; ++i) {
    const ParameterFile f = parameter_file(c, i);
    *P[i] = read_npy<float>(folder / f.name, {f.rows, f.cols});  // (rows, cols)
  }
  return m;
}

void require_model(const char* where, const Model& model) {
  const Config& c = model.config;
  require(c.heads > 0 && c.d_model % c.heads == 0 && head_width(c) % 2 == 0,
          fmt::format("{}: the model's config has d_model = {} over {} heads; it needs an even head width", where,
                      c.d_model, c.heads));
  require(model.layers.size() == c.layers,
          fmt::format("{}: the model has {} layers, but its config says {}", where, model.layers.size(), c.layers));
  const auto check = [&](const std::string& name, const Matrix& W, std::size_t rows, std::size_t cols) {
    require(W.shape(0) == rows && W.shape(1) == cols,
            fmt::format("{}: the model's {} is {}, but its config (vocab = {}, d_model = {}) needs ({}, {})", where,
                        name, shape_str(W), c.vocab, c.d_model, rows, cols));
    require_finite(where, ("the model's " + name).c_str(), W.data(), W.size());
  };
  check("embed", model.embed, c.vocab, c.d_model);
  for (std::size_t l = 0; l < c.layers; ++l) {
    const std::string at = fmt::format("layers[{}].", l);
    check(at + "W_Q", model.layers[l].W_Q, c.d_model, c.d_model);
    check(at + "W_K", model.layers[l].W_K, c.d_model, c.d_model);
    check(at + "W_V", model.layers[l].W_V, c.d_model, c.d_model);
    check(at + "W_O", model.layers[l].W_O, c.d_model, c.d_model);
  }
  check("unembed", model.unembed, c.d_model, c.vocab);
}

Matrix embed_tokens(const Model& model, const std::vector<std::size_t>& tokens) {
  const Config& c = model.config;
  require(!tokens.empty() && tokens.size() <= c.context,
          fmt::format("embed_tokens: {} tokens; the model takes 1 to {} (its context)", tokens.size(), c.context));
  // Model is a plain struct: an embedding edited to fewer rows than the vocabulary would be read past its end.
  require(model.embed.shape(0) == c.vocab && model.embed.shape(1) == c.d_model,
          fmt::format("embed_tokens: the model's embed is {}, but its config says ({}, {})", shape_str(model.embed),
                      c.vocab, c.d_model));
  Matrix X = Matrix::from_shape({tokens.size(), c.d_model});  // (n, d)
  for (std::size_t t = 0; t < tokens.size(); ++t) {
    require(tokens[t] < c.vocab, fmt::format("embed_tokens: token {} at position {} is outside the vocabulary 0 … {}",
                                             tokens[t], t, c.vocab - 1));
    xt::row(X, t) = xt::row(model.embed, tokens[t]);
  }
  return X;
}

// [forward]
Trace forward_embedded(const Model& model, const Matrix& X0, const HeadMask& keep) {
  const Config& c = model.config;
  const std::size_t n = X0.shape(0);
  require(X0.shape(1) == c.d_model && n > 0 && n <= c.context,
          fmt::format("forward: X0 is {}; the model takes (1 … {}, {})", shape_str(X0), c.context, c.d_model));
  require_finite("forward", "X0", X0.data(), X0.size());
  require_head_mask("forward", keep, c);
  require_model("forward", model);  // before d_model / heads: a config of 0 heads divided by zero (SIGFPE)
  const std::size_t d_k = head_width(c);
  Trace tr;
  tr.residual.push_back(X0);
  const Mask causal = causal_mask(n, n);  // (n, n)
  for (std::size_t l = 0; l < c.layers; ++l) {
    const Layer& L = model.layers[l];
    const Matrix& X = tr.residual.back();                                           // (n, d)
    const Matrix Q = matmul(X, L.W_Q), K = matmul(X, L.W_K), V = matmul(X, L.W_V);  // (n, d) each
    Matrix heads = xt::zeros<float>({n, c.d_model});                                // (n, d) concatenated
    tr.q.emplace_back();
    tr.k.emplace_back();
    tr.v.emplace_back();
    tr.attention.emplace_back();
    for (std::size_t h = 0; h < c.heads; ++h) {
      Matrix q = head_columns(Q, h, d_k), k = head_columns(K, h, d_k);  // (n, d_k) each
      const Matrix v = head_columns(V, h, d_k);                         // (n, d_k)
      apply_rope(q, 0, c.rope_base);                                    // chapter 11
      apply_rope(k, 0, c.rope_base);
      Matrix S = scaled_scores(q, k);  // (n, n), chapter 02
      S = xt::where(causal, S, -std::numeric_limits<float>::infinity());
      Matrix P = softmax_rows(S);  // (n, n)
      if (head_kept(keep, l, h))
        xt::view(heads, xt::all(), xt::range(h * d_k, (h + 1) * d_k)) = matmul(P, v);  // (n, d_k)
      tr.q.back().push_back(std::move(q));
      tr.k.back().push_back(std::move(k));
      tr.v.back().push_back(v);
      tr.attention.back().push_back(std::move(P));
    }
    Matrix next = X + matmul(heads, L.W_O);  // (n, d): the layer adds into the residual stream
    tr.heads_out.push_back(std::move(heads));
    tr.residual.push_back(std::move(next));
  }
  tr.logits = matmul(tr.residual.back(), model.unembed);  // (n, vocab)
  return tr;
}
// [forward]

Trace forward(const Model& model, const std::vector<std::size_t>& tokens, const HeadMask& keep) {
  return forward_embedded(model, embed_tokens(model, tokens), keep);
}

bool same_shapes(const Model& a, const Model& b) {
  const std::vector<const Matrix*> A = parameters(a), B = parameters(b);
  if (A.size() != B.size()) return false;
  for (std::size_t i = 0; i < A.size(); ++i)
    if (A[i]->shape() != B[i]->shape()) return false;
  return true;
}

void require_trace(const char* where, const Model& model, const Trace& tr) {
  require_model(where, model);
  const Config& c = model.config;
  const std::size_t n = tr.logits.shape(0), d_k = head_width(c);
  const auto is = [](const Matrix& M, std::size_t rows, std::size_t cols) {
    return M.shape(0) == rows && M.shape(1) == cols;
  };
  bool trace_fits = tr.residual.size() == c.layers + 1 && tr.heads_out.size() == c.layers && tr.q.size() == c.layers &&
                    tr.k.size() == c.layers && tr.v.size() == c.layers && tr.attention.size() == c.layers;
  for (std::size_t l = 0; trace_fits && l <= c.layers; ++l) trace_fits = is(tr.residual[l], n, c.d_model);
  for (std::size_t l = 0; trace_fits && l < c.layers; ++l) {
    trace_fits = is(tr.heads_out[l], n, c.d_model) && tr.q[l].size() == c.heads && tr.k[l].size() == c.heads &&
                 tr.v[l].size() == c.heads && tr.attention[l].size() == c.heads;
    for (std::size_t h = 0; trace_fits && h < c.heads; ++h)
      trace_fits =
          is(tr.q[l][h], n, d_k) && is(tr.k[l][h], n, d_k) && is(tr.v[l][h], n, d_k) && is(tr.attention[l][h], n, n);
  }
  require(trace_fits, fmt::format("{}: the trace is not one of this model ({} layers of {} heads, d_model = {}) on {} "
                                  "tokens: it has {} residual streams and {} layers of heads",
                                  where, c.layers, c.heads, c.d_model, n, tr.residual.size(), tr.q.size()));
}

void require_backward_inputs(const Model& model, const Trace& tr, const Matrix& dlogits,
                             const std::vector<std::size_t>& tokens, const Model& grads, const HeadMask& keep) {
  constexpr const char* where = "backward";
  const Config& c = model.config;
  const std::size_t n = tr.logits.shape(0);
  require(dlogits.shape() == tr.logits.shape() && tr.logits.shape(1) == c.vocab,
          fmt::format("{}: dlogits is {} and the trace's logits are {}; the model needs (n, {}) for both", where,
                      shape_str(dlogits), shape_str(tr.logits), c.vocab));
  require_finite(where, "dlogits", dlogits.data(), dlogits.size());
  require_trace(where, model, tr);
  require(same_shapes(model, grads),
          fmt::format("{}: the gradients have {} layers and an embedding of {}; the model has {} layers and "
                      "{} (make them with zeros_like(model))",
                      where, grads.layers.size(), shape_str(grads.embed), c.layers, shape_str(model.embed)));
  require(tokens.empty() || tokens.size() == n,
          fmt::format("{}: {} tokens for a trace of {} positions; give one per position, or none", where, tokens.size(),
                      n));
  for (std::size_t t = 0; t < tokens.size(); ++t)
    require(tokens[t] < c.vocab, fmt::format("{}: token {} at position {} is outside the vocabulary 0 … {}", where,
                                             tokens[t], t, c.vocab - 1));
  require_head_mask(where, keep, c);
}

// [induction_task]
InductionSequence make_induction(std::size_t n, std::size_t vocab, Rng& rng) {
  const std::size_t shortest = std::max<std::size_t>(2, n / 4);
  require(n >= 4 && n - shortest <= vocab,
          fmt::format("make_induction: n = {} with a vocabulary of {}; need n ≥ 4 and up to n − n/4 = {} distinct "
                      "tokens",
                      n, vocab, n >= shortest ? n - shortest : 0));
  checked_allocation("make_induction: the shuffled vocabulary vocab × 8 bytes", {vocab, sizeof(std::size_t)});
  std::uniform_int_distribution<std::size_t> pick_period(shortest, n / 2);
  const std::size_t period = pick_period(rng.engine()), fresh = n - period;  // fresh: distinct tokens needed
  std::vector<std::size_t> all(vocab);
  std::iota(all.begin(), all.end(), std::size_t{0});
  // A partial Fisher–Yates shuffle with the course's engine: the first `fresh` entries are distinct and uniform.
  for (std::size_t i = 0; i < fresh; ++i) {
    std::uniform_int_distribution<std::size_t> pick(i, vocab - 1);
    std::swap(all[i], all[pick(rng.engine())]);
  }
  InductionSequence s;
  s.period = period;
  s.tokens.assign(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(fresh));
  for (std::size_t i = fresh; i < n; ++i) s.tokens.push_back(s.tokens[i - period]);
  s.targets.assign(n, kIgnore);
  for (std::size_t i = fresh; i + 1 < n; ++i) s.targets[i] = s.tokens[i + 1];
  return s;
}
// [induction_task]

double previous_token_score(const Matrix& A) {
  const std::size_t n = A.shape(0);
  require(A.shape(1) == n, fmt::format("previous_token_score: A is {}; an attention map is (n, n)", shape_str(A)));
  require_finite("previous_token_score", "A", A.data(), A.size());
  if (n < 2) return 0.0;
  double sum = 0.0;
  for (std::size_t i = 1; i < n; ++i) sum += static_cast<double>(A(i, i - 1));
  return sum / static_cast<double>(n - 1);
}

double accuracy(const Matrix& logits, const std::vector<std::size_t>& targets) {
  require(targets.size() == logits.shape(0) && logits.shape(1) > 0,
          fmt::format("accuracy: logits are {} and there are {} targets; one target per row, and at least one token",
                      shape_str(logits), targets.size()));
  require_finite("accuracy", "logits", logits.data(),
                 logits.size());  // a NaN would make the largest logit's index garbage
  std::size_t counted = 0, right = 0;
  for (std::size_t i = 0; i < targets.size(); ++i) {
    if (targets[i] == kIgnore) continue;
    ++counted;
    const auto row = xt::row(logits, i);
    const std::size_t best =
        static_cast<std::size_t>(std::distance(row.begin(), std::max_element(row.begin(), row.end())));
    right += best == targets[i] ? 1 : 0;
  }
  return counted == 0 ? 0.0 : static_cast<double>(right) / static_cast<double>(counted);
}

}  // namespace attn::ch12
