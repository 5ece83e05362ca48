/// \file
/// Chapter 02's library: the article's retrieval analogy as data. A reader types "machine learning" (the
/// query q); every book on the shelf has catalogue tags (its key) and contents (its value). Not an
/// exercise: the chapter presents it and runs the contract's attention on it.
/// Book page: book/02_qkv_trace.md ("The library, as data").
#pragma once

#include <string>
#include <vector>

#include "attn/tensor.hpp"

namespace attn::ch02 {

/// A shelf of books, described in two different vocabularies: how the catalogue tags them (K) and what
/// is inside them (V).
struct Shelf {
  std::vector<std::string> titles;         ///< one per book: n_kv books
  std::vector<std::string> tag_names;      ///< the d_k catalogue tags: the key space
  std::vector<std::string> content_names;  ///< the d_v kinds of content: the value space
  Matrix K;                                ///< (n_kv, d_k) how strongly each book carries each tag
  Matrix V;                                ///< (n_kv, d_v) how much of each kind of content each book holds
};

/// The chapter's shelf: six books, d_k = 5 tags, d_v = 5 kinds of content.
const Shelf& library_shelf();

/// The reader's search, written in the shelf's tag space: "machine learning" is (1, d_k), a strong
/// weight on the machine-learning tag and nothing else.
Matrix machine_learning_query();

}  // namespace attn::ch02
