/// \file
/// Chapter 01, intuition: the contract the learner implements in exercises/01_intuition/intuition.cpp.
/// Book page: book/01_intuition.md. The reference answers are in solutions/01_intuition/intuition.cpp.
#pragma once

#include "attn/tensor.hpp"

namespace attn {

/// \defgroup ch01 Chapter 01: knowing where to look
/// The four functions of chapter 01: turn scores into weights, score one query against every key,
/// blend the values, and design the question a pronoun asks.
/// @{

/// Softmax that never overflows: `p_j = exp(x_j - m) / Σ_k exp(x_k - m)` with `m = max_k x_k`.
///
/// Subtracting the largest logit leaves the result unchanged (the factor `exp(-m)` cancels) but keeps
/// every exponent ≤ 0, so logits of ±1e4 give weights 0 and 1 instead of inf/inf = NaN.
///
/// \param logits (n) scores; -inf means "masked" and gets weight exactly 0.
/// \return (n) weights, each in [0, 1], summing to 1. Empty in, empty out. If every logit is -inf
///         there is nothing to attend to and the result is all zeros (never NaN).
/// \throws std::invalid_argument naming the index if a logit is NaN or +inf.
Vector stable_softmax(const Vector& logits);

/// How much one query attends to each key: `softmax_j(q · K_j / √d_k)`.
///
/// \param q (d_k) what this token is looking for.
/// \param K (n, d_k) what each of the n tokens offers, one key per row.
/// \return (n) attention weights over the n tokens, summing to 1 (n = 0 gives an empty vector).
/// \throws std::invalid_argument naming both shapes if q's length differs from K's columns, or is 0
///         (d_k = 0: no feature to compare, and nothing to divide by); naming a NaN/Inf of q or K, or when a
///         score could overflow (the course's overflow policy, attn/checks.hpp).
Vector attention_weights(const Vector& q, const Matrix& K);

/// The output of attention for one query: the weighted average `Σ_j w_j V_j` of the value rows.
///
/// \param weights (n) attention weights (from attention_weights()).
/// \param V (n, d_v) the content each token carries, one value per row.
/// \return (d_v) the blend.
/// \throws std::invalid_argument naming both shapes if weights has not one entry per row of V, or naming the
///         first NaN/Inf of weights or V.
Vector blend_values(const Vector& weights, const Matrix& V);

/// The question the pronoun 它 ("it") asks, written in the chapter's key space: a (d_k) vector whose
/// entries are named by attn::ch01::key_names() (noun, animate, human, place, action, pronoun).
///
/// It becomes the pronoun's row of W_Q, so a pronoun's query is exactly this vector. The chapter's tests
/// check that, in every sentence of the chapter, the pronoun's largest weight lands on its antecedent:
/// 猫 (cat), not 垫子 (mat) and not 小明 (a person); 书 (book), not 我 (I).
/// \return (d_k) the query.
Vector design_pronoun_query();

/// @}

}  // namespace attn
