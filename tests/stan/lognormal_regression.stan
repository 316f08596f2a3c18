// A log-normal regression as an LCVI program: log y_i ~ N(alpha + beta x_i,
// sigma^2), decisions for the outcomes at new points x_new, written in Stan as
// y_new = exp(alpha + beta x_new + sigma z) from the normal base samples.
functions {
  #include lcvi.stanfunctions
}
data {
  int<lower=1> N;
  vector[N] x;
  vector<lower=0>[N] y;
  int<lower=1> M; // new points, one decision each
  vector[M] x_new;
  #include lcvi_data.stan
}
parameters {
  real alpha;
  real beta;
  real<lower=0> sigma;
}
model {
  alpha ~ normal(0, 5);
  beta ~ normal(0, 5);
  sigma ~ normal(0, 2);
  y ~ lognormal(alpha + beta * x, sigma);
  vector[M] mu_new = alpha + beta * x_new;
  target += lcvi_utility(exp(rep_matrix(mu_new', lcvi_S) + sigma * lcvi_z), lcvi_h,
                         lcvi);
}
generated quantities {
  array[M] real y_rep = lognormal_rng(alpha + beta * x_new, sigma);
}
