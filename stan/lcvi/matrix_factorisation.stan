// Probabilistic matrix factorisation Y[i, j] ~ N((U V')[i, j], noise_sd^2) on
// the N training cells, normal(0, prior_sd) priors on all entries of U (I x K)
// and V (J x K), as an LCVI program (docs/your-own-model.md, "LCVI"): one
// decision per training cell. Cells are column-major indices into the I x J
// matrix.
functions {
  #include lcvi.stanfunctions
}
data {
  int<lower=1> I; // rows (users)
  int<lower=1> J; // columns (items)
  int<lower=1> K; // latent dimension
  int<lower=1> N; // training cells, and decisions
  array[N] int<lower=1, upper=I * J> cell; // column-major cell indices
  vector[N] y; // observed values of the training cells
  real<lower=0> prior_sd;
  real<lower=0> noise_sd;
  #include lcvi_data.stan
}
parameters {
  matrix[I, K] U;
  matrix[J, K] V;
}
model {
  vector[N] loc = to_vector(U * V')[cell];
  to_vector(U) ~ normal(0, prior_sd);
  to_vector(V) ~ normal(0, prior_sd);
  y ~ normal(loc, noise_sd);
  target += lcvi_utility(loc, rep_vector(noise_sd, N), lcvi_z, lcvi_h, lcvi);
}
