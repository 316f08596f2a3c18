// The weighted loss of a weighted Bayesian bootstrap problem, for in-process
// optimisation (stanflow.wbb.inprocess; docs/wbb.md). Both the predictions f
// and the weights w are parameters (unconstrained, so a point is (f, w) as
// given), and
//   target = -sum_i w[i] * loss(y[i], f[i], loss_params),
// so one gradient call gives everything the optimiser needs, for any weights:
//   -target                 the weighted loss,
//   d target / d f[i]  = -w[i] * loss'(y[i], f[i])   (the weighted derivatives),
//   d target / d w[i]  = -loss(y[i], f[i])           (every observation's loss).
// The weights change every draw and the data never do: one loaded model serves
// all draws, and many draws are one batch of points
// (stanflow.models.log_density_gradient_rows). A loss that rejects f makes the
// point's log density -inf, which the optimiser's line search backtracks from.
// Slot: loss.stanfunctions, real loss(real y, real f, vector loss_params)
//       (stan/losses, or a file of yours), the slot of stan/wbb/weighted_glm.stan.
functions {
  #include loss.stanfunctions
}
data {
  int<lower=1> N;
  vector[N] y;
  int<lower=0> n_loss_params;
  vector[n_loss_params] loss_params;
}
parameters {
  vector[N] f;
  vector[N] w;
}
model {
  vector[N] losses;
  for (i in 1 : N) {
    losses[i] = loss(y[i], f[i], loss_params);
  }
  target += -dot_product(w, losses);
}
