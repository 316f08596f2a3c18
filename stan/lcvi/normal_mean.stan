// Normal mean with known sigma and a normal prior, as an LCVI program
// (docs/your-own-model.md, "LCVI"): one decision per observation, for its
// outcome y_rep[n] ~ N(theta, sigma^2). The posterior is normal, so the
// calibrated optimum is known by brute force (tests/test_lcvi_conjugate_e2e.py).
functions {
  #include lcvi.stanfunctions
}
data {
  int<lower=1> N; // number of observations, and of decisions
  vector[N] y;
  real<lower=0> sigma; // known standard deviation of y
  real prior_mean;
  real<lower=0> prior_sd;
  #include lcvi_data.stan
}
parameters {
  real theta;
}
model {
  theta ~ normal(prior_mean, prior_sd);
  y ~ normal(theta, sigma);
  target += lcvi_utility(rep_vector(theta, N), rep_vector(sigma, N), lcvi_z,
                         lcvi_h, lcvi);
}
