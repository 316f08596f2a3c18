// Eight schools, centred (mu ~ N(0, 5), tau ~ half-Cauchy(0, 5)), as an LCVI
// program (docs/your-own-model.md, "LCVI"): one decision per school, for its
// outcome y_rep[j] ~ N(theta[j], sigma[j]^2), the utility term added to the
// target once with the outcomes' normal location and scale.
functions {
  #include lcvi.stanfunctions
}
data {
  int<lower=0> J; // number of schools
  vector[J] y; // estimated treatment effects
  vector<lower=0>[J] sigma; // standard errors of the estimates
  #include lcvi_data.stan
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
  target += lcvi_utility(theta, sigma, lcvi_z, lcvi_h, lcvi);
}
generated quantities {
  vector[J] log_lik;
  array[J] real y_rep = normal_rng(theta, sigma);
  for (j in 1 : J) {
    log_lik[j] = normal_lpdf(y[j] | theta[j], sigma[j]);
  }
}
