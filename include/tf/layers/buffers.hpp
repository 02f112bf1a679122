#pragma once
/// The activations a decoder's forward keeps between steps: the residual stream, its normed copy,
/// a block's output, and the attention and MLP blocks' own.
#include <tf/layers/attention.hpp>
#include <tf/layers/mlp.hpp>

namespace tf::layers {

template <class B>
struct decoder_buffers {
  typename B::buffer x, xn, o;  // residual stream, normed input, a block's output
  attention_buffers<B> att;
  mlp_buffers<B> mlp;
};

}  // namespace tf::layers
