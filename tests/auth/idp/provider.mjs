// The authorization server the tests start: oidc-provider (a certified OpenID Provider) on
// 127.0.0.1, configured for what anfitrion's gateway and client need. Test-only; never a product.
//
//   node provider.mjs            (ANFITRION_IDP_MODULES = the node_modules holding oidc-provider)
//
// Listens on a free loopback port, then prints one JSON line on stdout:
//   {"issuer": "http://127.0.0.1:PORT", "jwks": {...public keys...}}
// and serves until stdin closes or it is killed.
//
// What it offers:
// - JWT access tokens (RS256, typ at+jwt) bound to a resource indicator (RFC 8707); a resource
//   whose URI contains "opaque" gets opaque tokens instead (for introspection, RFC 7662).
// - introspection and revocation; PKCE (S256) required; client credentials; dynamic
//   registration; the token-exchange grant (RFC 8693, urn:ietf:params:oauth:grant-type:token-exchange).
// - OpenID Connect sign-in: ID tokens carry the `profile` (name) and `roles` claims asked for.
// - two users, alice and bob; the authorization endpoint logs in the user named by `login_hint`
//   (alice without one) and grants the scopes that user may have: no login page to drive.
// - POST /test/rotate (a test hook): a new signing key becomes current; the old one stays
//   published so tokens already issued stay valid.
import { createServer } from 'node:http';
import { createRequire } from 'node:module';
import { pathToFileURL } from 'node:url';

const modules = process.env.ANFITRION_IDP_MODULES;
if (!modules) {
  console.error('ANFITRION_IDP_MODULES is not set (run tests/auth/install_idp.sh)');
  process.exit(2);
}
const requireFrom = createRequire(`${modules}/`);
const { default: Provider, errors } = await import(pathToFileURL(requireFrom.resolve('oidc-provider')).href);
const jose = await import(pathToFileURL(requireFrom.resolve('jose')).href);

const TOKEN_EXCHANGE = 'urn:ietf:params:oauth:grant-type:token-exchange';
const ACCESS_TOKEN_TYPE = 'urn:ietf:params:oauth:token-type:access_token';
const RESOURCE_SCOPES = 'tools:read tools:write notes:read notes:write';

// what each user may be granted, and the roles carried in their tokens
const USERS = {
  alice: { scopes: RESOURCE_SCOPES.split(' '), roles: ['admin', 'support'], email: 'alice@example.test', name: 'Alice Liddell' },
  bob: { scopes: ['tools:read', 'notes:read'], roles: ['support'], email: 'bob@example.test', name: 'Bob Cratchit' },
};

const CLIENTS = [
  { // a public client: authorization code + PKCE, loopback redirect (any port)
    client_id: 'mcp-client',
    token_endpoint_auth_method: 'none',
    application_type: 'native',
    grant_types: ['authorization_code', 'refresh_token'],
    response_types: ['code'],
    redirect_uris: ['http://127.0.0.1/callback'],
    scope: `openid offline_access ${RESOURCE_SCOPES}`,
  },
  { // the gateway: introspects, exchanges tokens, and may act as a service account
    client_id: 'gateway',
    client_secret: 'gateway-secret-0123456789abcdef',
    grant_types: [TOKEN_EXCHANGE, 'client_credentials'],
    response_types: [],
    redirect_uris: [],
    scope: RESOURCE_SCOPES,
  },
  { // a service account with client credentials only
    client_id: 'service',
    client_secret: 'service-secret-0123456789abcdef',
    grant_types: ['client_credentials'],
    response_types: [],
    redirect_uris: [],
    scope: 'tools:read notes:read',
  },
];

async function signingKey(kid) {
  const { privateKey } = await jose.generateKeyPair('RS256', { extractable: true });
  return { ...(await jose.exportJWK(privateKey)), kid, alg: 'RS256', use: 'sig' };
}

const keys = [await signingKey('k1')];

function resourceInfo(indicator) {
  return {
    scope: RESOURCE_SCOPES,
    audience: indicator,
    accessTokenTTL: 600,
    accessTokenFormat: indicator.includes('opaque') ? 'opaque' : 'jwt',
    jwt: { sign: { alg: 'RS256' } },
  };
}

function configuration(jwks) {
  return {
    clients: CLIENTS,
    jwks,
    scopes: ['openid', 'offline_access', 'profile', 'roles', ...RESOURCE_SCOPES.split(' ')],
    claims: { openid: ['sub'], email: ['email'], profile: ['name'], roles: ['roles'] },
    // the inbox's sign-in reads the ID token alone: its claims go in it
    conformIdTokenClaims: false,
    pkce: { required: () => true },
    features: {
      devInteractions: { enabled: false },
      introspection: { enabled: true },
      revocation: { enabled: true },
      clientCredentials: { enabled: true },
      registration: { enabled: true },
      resourceIndicators: {
        enabled: true,
        defaultResource: () => undefined,
        useGrantedResource: () => true,
        getResourceServerInfo: (ctx, indicator) => resourceInfo(indicator),
      },
    },
    interactions: { url: (ctx, interaction) => `/interaction/${interaction.uid}` },
    findAccount: (ctx, id) => (USERS[id] ? {
      accountId: id,
      claims: () => ({ sub: id, email: USERS[id].email, name: USERS[id].name, roles: USERS[id].roles }),
    } : undefined),
    extraTokenClaims: (ctx, token) => ({
      ...(token.accountId && USERS[token.accountId] ? { roles: USERS[token.accountId].roles } : {}),
      // RFC 8693 §4.1: who acts for the subject
      ...(token.gty === 'token_exchange' ? { act: { sub: token.clientId } } : {}),
    }),
    ttl: { AccessToken: 600, ClientCredentials: 600, Grant: 3600, Interaction: 600, Session: 3600 },
  };
}

// the user's own session: login by login_hint, consent to what that user may be granted
async function interaction(provider, ctx) {
  const details = await provider.interactionDetails(ctx.req, ctx.res);
  const { prompt, params } = details;
  let result;
  if (prompt.name === 'login') {
    const accountId = params.login_hint || 'alice';
    if (!USERS[accountId]) {
      result = { error: 'access_denied', error_description: 'no such test user' };
    } else {
      result = { login: { accountId } };
    }
  } else {
    const { accountId } = details.session;
    const allowed = new Set(USERS[accountId].scopes);
    const grant = details.grantId
      ? await provider.Grant.find(details.grantId)
      : new provider.Grant({ accountId, clientId: params.client_id });
    const missing = prompt.details;
    if (missing.missingOIDCScope) grant.addOIDCScope(missing.missingOIDCScope.join(' '));
    if (missing.missingOIDCClaims) grant.addOIDCClaims(missing.missingOIDCClaims);
    for (const [indicator, scopes] of Object.entries(missing.missingResourceScopes || {})) {
      grant.addResourceScope(indicator, scopes.filter((s) => allowed.has(s)).join(' '));
      grant.rejectResourceScope(indicator, scopes.filter((s) => !allowed.has(s)).join(' '));
    }
    result = { consent: { grantId: await grant.save() } };
  }
  ctx.redirect(await provider.interactionResult(ctx.req, ctx.res, result, { mergeWithLastSubmission: false }));
}

// RFC 8693: a token of this issuer for a resource, exchanged for one for another resource, with
// the same subject and at most the scopes the subject token had
function tokenExchange(provider, publicKeys) {
  return async (ctx) => {
    const { params, client } = ctx.oidc;
    if (params.subject_token_type !== ACCESS_TOKEN_TYPE) {
      throw new errors.InvalidRequest('subject_token_type must be an access token');
    }
    let subject;
    try {
      ({ payload: subject } = await jose.jwtVerify(params.subject_token, publicKeys(), {
        issuer: provider.issuer, typ: 'at+jwt', algorithms: ['RS256'],
      }));
    } catch {
      throw new errors.InvalidGrant('subject_token is not a valid access token of this issuer');
    }
    const resource = params.resource || params.audience;
    if (!resource) throw new errors.InvalidTarget('resource (or audience) is required');
    const had = new Set(String(subject.scope || '').split(' ').filter(Boolean));
    const asked = params.scope ? params.scope.split(' ') : [...had];
    const scope = asked.filter((s) => had.has(s) && RESOURCE_SCOPES.split(' ').includes(s));
    const info = resourceInfo(resource);
    const token = new provider.AccessToken({
      accountId: USERS[subject.sub] ? subject.sub : undefined,
      client,
      scope: scope.join(' ') || undefined,
      gty: 'token_exchange',
    });
    token.resourceServer = new provider.ResourceServer(resource, info);
    ctx.oidc.entity('AccessToken', token);
    const value = await token.save();
    ctx.body = {
      access_token: value,
      issued_token_type: ACCESS_TOKEN_TYPE,
      token_type: 'Bearer',
      expires_in: token.expiration,
      scope: token.scope || '',
    };
  };
}

const server = createServer();
await new Promise((resolve) => { server.listen(0, '127.0.0.1', resolve); });
const issuer = `http://127.0.0.1:${server.address().port}`;

let handler;
const publicJwks = () => ({ keys: keys.map(({ kty, n, e, kid, alg, use }) => ({ kty, n, e, kid, alg, use })) });
const build = () => {
  // the newest key signs (oidc-provider signs with the first key of an alg)
  const made = new Provider(issuer, configuration({ keys: [...keys].reverse() }));
  const localSet = jose.createLocalJWKSet(publicJwks());
  made.registerGrantType(TOKEN_EXCHANGE, tokenExchange(made, () => localSet),
    ['subject_token', 'subject_token_type', 'actor_token', 'actor_token_type', 'requested_token_type', 'audience', 'resource', 'scope'],
    ['resource', 'audience']);
  made.use(async (ctx, next) => {
    const match = /^\/interaction\/([^/]+)$/.exec(ctx.path);
    if (match && ctx.method === 'GET') {
      await interaction(made, ctx);
      return;
    }
    await next();
  });
  return made;
};
handler = build().callback();

server.on('request', async (req, res) => {
  if (req.method === 'POST' && req.url === '/test/rotate') {
    keys.push(await signingKey(`k${keys.length + 1}`));
    handler = build().callback();
    res.writeHead(200, { 'content-type': 'application/json' });
    res.end(JSON.stringify({ kid: keys[keys.length - 1].kid }));
    return;
  }
  handler(req, res);
});

process.stdout.write(`${JSON.stringify({ issuer, jwks: publicJwks() })}\n`);
process.stdin.on('end', () => process.exit(0));
process.stdin.resume();
