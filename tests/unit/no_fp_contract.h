// Included by tests whose double/float references must round after every operation, like the
// kernels they check (no FMA contraction). Include it after the other headers: it applies to the
// functions defined after it in the including file. (No include guard on purpose.)
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("fp-contract=off")
#elif defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif
