import { startFauxqs } from 'fauxqs';

/**
 * fauxqs (SQS, SNS and S3 on one endpoint) in a process of its own, so its CPU is counted apart from
 * the relay's (bench/buses.ts): `node fauxqs.js <port>`; prints a line once it listens.
 */
const server = await startFauxqs({ port: Number(process.argv[2]), logger: false });
process.stdout.write('listening\n');
process.once('SIGTERM', () => void server.stop().then(() => process.exit(0)));
