import type { Request } from 'express';
import { clientAddress } from '../../audit-trail.js';

/** Who made an admin request, as the audit trail records it: the client's address (no proxy is trusted). */
export const requester = (req: Request): string => clientAddress(req.socket.remoteAddress);
