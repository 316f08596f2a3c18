// Eight schools, centred parameterisation (Rubin 1981; BDA3 section 5.5).
// Same model as eight_schools_noncentered.stan; its funnel between tau and theta
// makes NUTS diverge, which is why it is kept as a contrast.
data {
  int<lower=0> J; // number of schools
  vector[J] y; // estimated treatment effects
  vector<lower=0>[J] sigma; // standard errors of the estimates
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
}
generated quantities {
  vector[J] log_lik;
  array[J] real y_rep = normal_rng(theta, sigma);
  for (j in 1 : J) {
    log_lik[j] = normal_lpdf(y[j] | theta[j], sigma[j]);
  }
}
