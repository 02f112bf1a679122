#pragma once
/// The gated MLP, written once for every backend: down(act(gate x) * up x), with gate and up as
/// two matrices or one merged [2 ff, hidden] projection.
#include <tf/backend/backend.hpp>

namespace tf::layers {

/// One layer's MLP weights; `gate_up` replaces gate and up when the file merges them.
template <class B>
struct mlp_weights {
  typename B::matrix gate, up, down, gate_up;
};

template <class B>
struct mlp_buffers {
  typename B::buffer g, u;
};

/// out = down(act(gate xn) * up xn).
template <class B>
void gated_mlp(B& be, typename B::step const& s, mlp_weights<B> const& w, backend::activation act,
               typename B::buffer const& xn, typename B::buffer& out, mlp_buffers<B>& m) {
  if (!w.gate_up.empty()) {
    be.matmul(w.gate_up, xn, m.u);
    be.glu_merged(s, act, m.u, m.g);
  } else {
    be.matmul_group({{w.gate, m.g}, {w.up, m.u}}, xn);
    be.glu(s, act, m.g, m.u);
  }
  be.matmul(w.down, m.g, out);
}

/// out = down(act(up xn)): an MLP without a gate (Nemotron-H's relu²).
template <class B>
void plain_mlp(B& be, typename B::step const& s, mlp_weights<B> const& w, backend::activation act,
               typename B::buffer const& xn, typename B::buffer& out, mlp_buffers<B>& m) {
  be.matmul(w.up, xn, m.u);
  be.activate(s, act, m.u);
  be.matmul(w.down, m.u, out);
}

}  // namespace tf::layers
