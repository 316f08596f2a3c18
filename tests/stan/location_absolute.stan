// The location template's median with a uniform prior on [0, 8], written as a
// user would write it: one Stan program, no slots.
data {
  int<lower=1> N;
  vector[N] y;
  real<lower=0> omega;
  vector<lower=0>[N] weights;
}
parameters {
  real<lower=0, upper=8> theta;
}
model {
  target += -omega * dot_product(weights, abs(y - theta));
}
