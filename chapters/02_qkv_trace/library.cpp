// The article's library analogy, as numbers the chapter can attend over. Book page: book/02_qkv_trace.md.
// Every number is chosen by hand and readable: a tag weight of 3 means "this is what the book is
// about", 1 "it is in there too", 0 "not this book". Contents are fractions of the book.
#include "02_qkv_trace/library.hpp"

namespace attn::ch02 {

// clang-format off
// [shelf]
const Shelf& library_shelf() {
  static const Shelf shelf{
      {"Machine Learning: A First Course", "Deep Learning in Practice", "Statistical Inference",
       "Programming in C++", "The Joy of Baking", "A History of the Silk Road"},
      //  tags (K):   machine learning, statistics, programming, cooking, history
      {"machine learning", "statistics", "programming", "cooking", "history"},
      //  content (V): equations, code, worked examples, recipes, stories
      {"equations", "code", "examples", "recipes", "stories"},
      Matrix{{3.0f, 1.0f, 1.0f, 0.0f, 0.0f},    // Machine Learning: A First Course
             {2.5f, 0.0f, 2.0f, 0.0f, 0.0f},    // Deep Learning in Practice
             {0.5f, 3.0f, 0.0f, 0.0f, 0.0f},    // Statistical Inference
             {0.0f, 0.0f, 3.0f, 0.0f, 0.0f},    // Programming in C++
             {0.0f, 0.0f, 0.0f, 3.0f, 0.0f},    // The Joy of Baking
             {0.0f, 0.0f, 0.0f, 0.0f, 3.0f}},   // A History of the Silk Road
      Matrix{{0.5f, 0.2f, 0.3f, 0.0f, 0.0f},    // mostly equations, some code and examples
             {0.2f, 0.5f, 0.3f, 0.0f, 0.0f},    // mostly code
             {0.7f, 0.0f, 0.3f, 0.0f, 0.0f},    // equations and examples
             {0.0f, 0.7f, 0.3f, 0.0f, 0.0f},    // code and examples
             {0.0f, 0.0f, 0.1f, 0.8f, 0.1f},    // recipes
             {0.0f, 0.0f, 0.0f, 0.0f, 1.0f}}};  // stories
  return shelf;
}

Matrix machine_learning_query() {
  // What the search box sends: "machine learning", firmly (3), nothing else.
  return Matrix{{3.0f, 0.0f, 0.0f, 0.0f, 0.0f}};  // (1, d_k)
}
// [shelf]
// clang-format on

}  // namespace attn::ch02
