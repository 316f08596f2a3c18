// Category probabilities on a simplex as a loss program: loss_i = -log p[y[i]],
// a flat Dirichlet prior. C parameter values, C - 1 unconstrained coordinates.
data {
  int<lower=2> C;
  int<lower=1> N;
  array[N] int<lower=1, upper=C> y;
  real<lower=0> omega;
  vector<lower=0>[N] weights;
}
parameters {
  simplex[C] p;
}
model {
  vector[N] log_lik;
  for (i in 1 : N) {
    log_lik[i] = categorical_lpmf(y[i] | p);
  }
  target += omega * dot_product(weights, log_lik);
  target += dirichlet_lpdf(p | rep_vector(1, C));
}
generated quantities {
  vector[N] log_lik;
  for (i in 1 : N) {
    log_lik[i] = categorical_lpmf(y[i] | p);
  }
}
