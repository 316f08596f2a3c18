// Normal mean with known sigma and a normal prior, with the LCVI utility term
// added to the target, so that ADVI maximises ELBO + weight * U:
//   target += weight * utility_term(l(y[s] | theta, h)),
//   y[s, n] = theta + sigma * eps_y[s, n]  (fixed base samples, data).
// The posterior is normal, so the calibrated optimum is known by brute force
// (tests/test_lcvi_conjugate_e2e.py). Slot (docs/lcvi.md):
//   loss.stanfunctions: real loss(real y, real f, vector loss_params)
functions {
  #include utility.stanfunctions // includes the slot loss.stanfunctions
}
data {
  int<lower=1> N; // number of observations, and of decisions
  vector[N] y;
  real<lower=0> sigma; // known standard deviation of y
  real prior_mean;
  real<lower=0> prior_sd;
  int<lower=1> S; // outcome samples per theta
  matrix[S, N] eps_y; // their fixed standard normal base samples
  vector[N] h; // decisions, one per observation
  int<lower=0> n_loss_params;
  vector[n_loss_params] loss_params;
  int<lower=1, upper=2> utility; // 1: M - l, 2: exp(-gamma l)
  real<lower=0> scale; // M or gamma
  int<lower=1, upper=2> estimator; // 1: naive, 2: linearised
  real<lower=0> weight; // weight of the utility term; 0: plain VI
}
parameters {
  real theta;
}
model {
  theta ~ normal(prior_mean, prior_sd);
  y ~ normal(theta, sigma);
  if (weight > 0) {
    target += weight
              * utility_term(outcome_losses(rep_vector(theta, N),
                                            rep_vector(sigma, N), eps_y, h,
                                            loss_params),
                             utility, scale, estimator);
  }
}
