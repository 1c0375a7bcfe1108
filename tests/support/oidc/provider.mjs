// A real OAuth 2.1 / OpenID Connect provider for the connections tests: the certified
// `oidc-provider` package, on 127.0.0.1 and a free port, stopping when its standard input
// closes (so it never outlives the test that started it). It prints one JSON line when ready:
// {"issuer": "http://127.0.0.1:PORT"}.
//
// What a test drives by HTTP besides the standard endpoints:
//   POST /test/clients        {client_id, client_secret, redirect_uris, trust?}: registers a
//                             client; with `trust` ({issuer, jwks_uri}: the company IdP this
//                             client's token exchanges accept) it may also use the RFC 8693
//                             token-exchange grant (below)
//   GET  /interaction/:uid    the consent page: a form naming the client and the scopes
//   POST /interaction/:uid    form fields `user` (the subject signing in) and `decision`
//                             (allow | deny); allow signs in and grants every asked scope
//   GET  /test/whoami         the downstream "API": the bearer access token's subject and
//                             scopes, client and grant type (`gty`), 401 for an unknown,
//                             expired or revoked token
//   GET  /test/exchanges      how many tokens each subject got by token exchange: {sub: n}
//
// The token-exchange grant (RFC 8693, urn:ietf:params:oauth:grant-type:token-exchange): a
// client with `trust` sends a person's access token from that IdP as `subject_token`
// (type ...:access_token); the provider checks its signature against the IdP's JWKS, its
// issuer and expiry (no leeway) and issues its own access token for the token's `sub`, with
// the asked scopes it knows. Anything else is `invalid_grant` (`invalid_request` for a
// missing parameter or another token type), as a provider that trusts one IdP answers.
// Options (argv JSON): {"access_ttl": seconds}.
import http from 'node:http';
import { createRemoteJWKSet, jwtVerify } from 'jose';
import Provider, { errors } from 'oidc-provider';

const options = JSON.parse(process.argv[2] || '{}');
const SCOPES = ['openid', 'offline_access', 'repo', 'read', 'write'];

const server = http.createServer();
await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
const issuer = `http://127.0.0.1:${server.address().port}`;

const provider = new Provider(issuer, {
  clients: [],
  scopes: SCOPES,
  pkce: { required: () => true },
  features: {
    devInteractions: { enabled: false },
    revocation: { enabled: true },
    introspection: { enabled: true },
  },
  ttl: {
    AccessToken: options.access_ttl || 3600,
    AuthorizationCode: 60,
    Interaction: 600,
    Grant: 3600,
    Session: 3600,
    RefreshToken: 86400,
  },
  issueRefreshToken: async (_ctx, client) => client.grantTypeAllowed('refresh_token'),
  findAccount: async (_ctx, sub) => ({ accountId: sub, claims: async () => ({ sub }) }),
  interactions: { url: (_ctx, interaction) => `/interaction/${interaction.uid}` },
  cookies: { keys: ['kiln-test-provider-cookie-key'] },
});

const EXCHANGE = 'urn:ietf:params:oauth:grant-type:token-exchange';
const ACCESS_TOKEN_TYPE = 'urn:ietf:params:oauth:token-type:access_token';
const trusted = new Map(); // client_id -> {issuer, jwks}: whose tokens it may exchange
const exchanges = {}; // sub -> how many tokens it got by exchange

provider.registerGrantType(EXCHANGE, async (ctx) => {
  const { params, client } = ctx.oidc;
  if (!params.subject_token) throw new errors.InvalidRequest('subject_token is missing');
  if (params.subject_token_type !== ACCESS_TOKEN_TYPE) {
    throw new errors.InvalidRequest('only access tokens are exchanged here');
  }
  const trust = trusted.get(client.clientId);
  if (!trust) throw new errors.UnauthorizedClient('this client may not exchange tokens');
  let claims;
  try {
    ({ payload: claims } = await jwtVerify(params.subject_token, trust.jwks, { issuer: trust.issuer }));
  } catch (error) {
    throw new errors.InvalidGrant(`subject_token refused (${error.code || error.name})`);
  }
  if (!claims.sub) throw new errors.InvalidGrant('subject_token has no subject');
  const asked = String(params.scope || '').split(' ').filter((s) => SCOPES.includes(s));
  const token = new provider.AccessToken({
    accountId: claims.sub, client, scope: asked.join(' ') || undefined, gty: EXCHANGE,
  });
  const value = await token.save();
  exchanges[claims.sub] = (exchanges[claims.sub] || 0) + 1;
  ctx.body = {
    access_token: value,
    issued_token_type: ACCESS_TOKEN_TYPE,
    token_type: 'Bearer',
    expires_in: token.expiration,
    ...(token.scope ? { scope: token.scope } : {}),
  };
}, ['subject_token', 'subject_token_type', 'scope', 'audience', 'requested_token_type']);

const escape = (s) => String(s).replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);

async function body(req) {
  const chunks = [];
  for await (const chunk of req) chunks.push(chunk);
  return Buffer.concat(chunks).toString('utf8');
}

function send(res, status, type, text) {
  res.writeHead(status, { 'content-type': type, 'cache-control': 'no-store' });
  res.end(text);
}

async function interaction(req, res, uid) {
  const details = await provider.interactionDetails(req, res);
  if (details.uid !== uid) return send(res, 400, 'text/plain', 'interaction mismatch');
  const asked = String(details.params.scope || '').split(' ').filter(Boolean);
  if (req.method === 'GET') {
    const page = `<!doctype html><html><head><title>Consent</title></head><body>
<h1>Allow ${escape(details.params.client_id)}?</h1>
<p id="scopes">Scopes: ${escape(asked.join(' '))}</p>
<form method="post" action="/interaction/${escape(uid)}">
<label>User <input name="user" id="user" value="alice"></label>
<button name="decision" value="allow" id="allow">Allow</button>
<button name="decision" value="deny" id="deny">Deny</button>
</form></body></html>`;
    return send(res, 200, 'text/html; charset=utf-8', page);
  }
  const form = new URLSearchParams(await body(req));
  if (form.get('decision') !== 'allow') {
    return provider.interactionFinished(req, res, {
      error: 'access_denied', error_description: 'the person declined',
    }, { mergeWithLastSubmission: false });
  }
  const accountId = form.get('user') || 'alice';
  const grant = new provider.Grant({ accountId, clientId: details.params.client_id });
  grant.addOIDCScope(asked.filter((s) => SCOPES.includes(s)).join(' '));
  const grantId = await grant.save();
  return provider.interactionFinished(req, res, {
    login: { accountId }, consent: { grantId },
  }, { mergeWithLastSubmission: false });
}

async function whoami(req, res) {
  const auth = req.headers.authorization || '';
  const token = auth.startsWith('Bearer ') ? auth.slice(7) : '';
  const found = token ? await provider.AccessToken.find(token) : undefined;
  if (!found || found.isExpired) return send(res, 401, 'application/json', '{"error":"invalid_token"}');
  const answer = {
    sub: found.accountId, scope: found.scope, client_id: found.clientId, gty: found.gty,
  };
  return send(res, 200, 'application/json', JSON.stringify(answer));
}

const oidc = provider.callback();
server.on('request', async (req, res) => {
  const url = new URL(req.url, issuer);
  try {
    const match = url.pathname.match(/^\/interaction\/([A-Za-z0-9_-]+)$/);
    if (match) return await interaction(req, res, match[1]);
    if (url.pathname === '/test/whoami') return await whoami(req, res);
    if (url.pathname === '/test/exchanges') {
      return send(res, 200, 'application/json', JSON.stringify(exchanges));
    }
    if (url.pathname === '/test/clients' && req.method === 'POST') {
      const c = JSON.parse(await body(req));
      await provider.Client.adapter.upsert(c.client_id, {
        client_id: c.client_id,
        client_secret: c.client_secret,
        redirect_uris: c.redirect_uris,
        grant_types: ['authorization_code', 'refresh_token', ...(c.trust ? [EXCHANGE] : [])],
        response_types: ['code'],
        token_endpoint_auth_method: 'client_secret_post',
      });
      if (c.trust) {
        const jwks = createRemoteJWKSet(new URL(c.trust.jwks_uri));
        trusted.set(c.client_id, { issuer: c.trust.issuer, jwks });
      }
      return send(res, 201, 'application/json', '{}');
    }
    return oidc(req, res);
  } catch (error) {
    process.stderr.write(`provider.mjs: ${error.stack || error}\n`);
    if (!res.headersSent) send(res, 400, 'text/plain', String(error.message || error));
  }
});

process.stdin.on('end', () => process.exit(0));
process.stdin.on('close', () => process.exit(0));
process.stdin.resume();
process.stdout.write(`${JSON.stringify({ issuer })}\n`);
