// Eight schools, centred (mu ~ N(0, 5), tau ~ half-Cauchy(0, 5)), with the LCVI
// utility term added to the target, so that ADVI maximises ELBO + weight * U:
//   target += weight * utility_term(l(y[s] | theta, h)),
//   y[s, j] = theta[j] + sigma[j] * eps_y[s, j]  (fixed base samples, data).
// ADVI's own draw theta = mu + sigma * eps_theta is the outer reparameterisation.
// weight = 0 gives plain VI. Slot (docs/lcvi.md):
//   loss.stanfunctions: real loss(real y, real f, vector loss_params)
functions {
  #include utility.stanfunctions // includes the slot loss.stanfunctions
}
data {
  int<lower=0> J; // number of schools
  vector[J] y; // estimated treatment effects
  vector<lower=0>[J] sigma; // standard errors of the estimates
  int<lower=1> S; // outcome samples per theta
  matrix[S, J] eps_y; // their fixed standard normal base samples
  vector[J] h; // decisions, one per school
  int<lower=0> n_loss_params;
  vector[n_loss_params] loss_params;
  int<lower=1, upper=2> utility; // 1: M - l, 2: exp(-gamma l)
  real<lower=0> scale; // M or gamma
  int<lower=1, upper=2> estimator; // 1: naive, 2: linearised
  real<lower=0> weight; // weight of the utility term; 0: plain VI
}
parameters {
  real mu;
  real<lower=0> tau;
  vector[J] theta;
}
model {
  mu ~ normal(0, 5);
  tau ~ cauchy(0, 5);
  theta ~ normal(mu, tau);
  y ~ normal(theta, sigma);
  if (weight > 0) {
    target += weight
              * utility_term(outcome_losses(theta, sigma, eps_y, h,
                                            loss_params),
                             utility, scale, estimator);
  }
}
generated quantities {
  vector[J] log_lik;
  array[J] real y_rep = normal_rng(theta, sigma);
  for (j in 1 : J) {
    log_lik[j] = normal_lpdf(y[j] | theta[j], sigma[j]);
  }
}
