/* keygen.h: `corral-node keygen [--out DIR] NAME`, the CURVE keypair
 * writer (keygen.c). */
#ifndef ND_KEYGEN_H
#define ND_KEYGEN_H

/* Runs the verb on argv[0] = "keygen" and its flags; prints the result or
 * "Error: ..." and returns the process exit code (0, 1). */
int nd_keygen_main(int argc, char **argv);

#endif
