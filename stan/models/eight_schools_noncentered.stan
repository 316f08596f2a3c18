// Eight schools, non-centred parameterisation (Rubin 1981; BDA3 section 5.5).
// theta = mu + tau * theta_tilde keeps the geometry easy for NUTS when tau is small.
data {
  int<lower=0> J; // number of schools
  vector[J] y; // estimated treatment effects
  vector<lower=0>[J] sigma; // standard errors of the estimates
}
parameters {
  real mu;
  real<lower=0> tau;
  vector[J] theta_tilde;
}
transformed parameters {
  vector[J] theta = mu + tau * theta_tilde;
}
model {
  mu ~ normal(0, 5);
  tau ~ cauchy(0, 5);
  theta_tilde ~ std_normal();
  y ~ normal(theta, sigma);
}
generated quantities {
  vector[J] log_lik;
  array[J] real y_rep = normal_rng(theta, sigma);
  for (j in 1 : J) {
    log_lik[j] = normal_lpdf(y[j] | theta[j], sigma[j]);
  }
}
